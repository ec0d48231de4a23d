"""``lastcall repro RUN_DIR``: a standalone script (standard library only) that reproduces an engine finding.

What a run dir holds is untrusted (docs/trust.md): it is read through the bounded readers, and only an
allow-list of its fields reaches the script (the scenario's name, the steps' kinds, a few numbers, a stream's
client fault of :data:`CLIENT_FAULTS`, a signal of :data:`SIGNALS`, a role of :data:`ROLES`, the flags of
:data:`FLAGS`), each embedded as one ``repr()`` literal, never as code.  Anything else refuses the run dir with
one located line (exit 2).  The engine's environment gets only the variables of :data:`ENV` (the NIXL side
channel's), a held port's number as ``{held}`` (the script holds a port of its own), and
``--kv-transfer-config`` only a JSON object of :data:`KV_CONFIG`, written anew.

Returns 0 (written), 2 (refused)."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path
from typing import Any

from harness.artifacts import MAX_HISTORY_BYTES, ArtifactError, read_text
from harness.engine.host import AFTER_FAILURE_S
from harness.eventlines import check_line, lines_of
from harness.repro.script import BODY
from harness.scenario.engine_steps import STALLED_RCVBUF
from harness.scenario.fields import MAX_COUNT
from harness.targets.vllm_engine import VLLM_ENV
from harness.verdicts_file import read_meta

__all__ = ["FINDINGS", "build", "main", "RefusedError"]

# One declaration per finding: scenario -> the check its script makes (the template is shared: script.BODY),
# what it says, and the checker of expected.yaml its exit status stands for (1: violated, 0: ok)
FINDINGS: dict[str, tuple[str, str, str]] = {
    "engine-sigkill-api-server": ("orphans", "EngineCore/worker outlive a SIGKILLed API server (orphaned)",
                                  "engine_tree_exits"),
    "engine-tp2-sigkill-api-server": ("orphans", "EngineCore/workers outlive a SIGKILLed API server (tp 2)",
                                      "engine_tree_exits"),
    "engine-shutdown-timeout-0": ("stream_hangs", "a stream in flight at SIGTERM (--shutdown-timeout 0) never "
                                  "ends", "engine_requests_end"),
    "engine-sigint-during-stream": ("stream_hangs", "a stream in flight at SIGINT never ends", "engine_requests_end"),
    "engine-sigkill-engine-core": ("exit_zero", "the API server exits 0 after its EngineCore was killed",
                                   "engine_exit_status"),
    "engine-sigterm-idle": ("files_left", "a SIGTERM to the idle API server leaves files in TMPDIR (ZMQ IPC socket "
                            "files, torch.distributed's vllm_dist_<hex> FileStore file)", "engine_nothing_left"),
    "engine-nixl-held-port": ("start_hangs", "the start hangs when the NIXL side-channel port is held by another "
                              "process", "engine_start_ends"),
    "engine-sigkill-worker": ("exit_zero", "the API server exits 0 after its worker was SIGKILLed (its engine died)",
                              "engine_exit_status"),
    "engine-sigint-worker": ("exit_zero", "the API server exits 0 after its worker stopped on SIGINT (its engine "
                             "died)", "engine_exit_status"),
    "engine-client-disconnects-mid-stream": ("stream_hangs", "after a client went away mid-stream, a stream in "
                                             "flight at SIGTERM never ends", "engine_requests_end"),
    "engine-stream-reader-stalls": ("stream_hangs", "a stream whose reader stalled, in flight at SIGTERM, never "
                                    "ends", "engine_requests_end"),
}
SIGNALS = frozenset({"SIGKILL", "SIGTERM", "SIGINT"})
ROLES = frozenset({"api_server", "engine_core", "worker"})
# flags of `vllm serve` a reproducer passes on: flag -> whether it takes a value
FLAGS = {"--host": True, "--max-model-len": True, "--max-num-seqs": True, "--enforce-eager": False,
         "--dtype": True, "--tensor-parallel-size": True, "--shutdown-timeout": True, "--kv-transfer-config": True}
# --kv-transfer-config's JSON object: key -> the values it may have (the scenarios' kv_connector, vLLM's roles)
KV_CONFIG = {"kv_connector": frozenset({"NixlConnector"}), "kv_role": frozenset({"kv_both", "kv_producer",
                                                                                  "kv_consumer"})}
MAX_KV_CONFIG = 200  # characters: the scenarios' object is 55
# the engine's environment a reproducer sets, beside its own TMPDIR: variable -> what it may be.  The side
# channel is held on 127.0.0.1 (as the hold_port step holds it), so that is its only host.
ENV: dict[str, frozenset[str] | str] = {"VLLM_NIXL_SIDE_CHANNEL_HOST": frozenset({"127.0.0.1"}),
                                        "VLLM_NIXL_SIDE_CHANNEL_PORT": "port"}
HELD = "{held}"  # the port the script holds, where the run gave the port its hold_port step held
STEP_KINDS = frozenset({"engine_request", "engine_signal", "wait_gone", "engine_restart", "hold_port"})
# a stream's client faults (harness.scenario.engine_spec): stop reading after N events, or go away after N
CLIENT_FAULTS = ("stop_reading_after", "disconnect_after")
STREAM_S = 10.0  # how long a stream may take to end after the waits (the scenarios' bound of an ended request)
PORT = re.compile(r"[1-9][0-9]{0,4}")
MAX_STEPS = 20  # an engine scenario has a handful
VALUE = re.compile(r"[A-Za-z0-9._-]{1,32}")  # a flag's value: a number, an address, a dtype
STANDIN = ["-m", "harness.engine.standin", "serve"]  # how a stand-in run's argv begins (it names no model)
STANDIN_MODEL = "standin"


class RefusedError(ValueError):
    """A run dir a reproducer cannot be written from; its text is the one located line."""


def _word(value: Any, allowed: Any, where: str) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise RefusedError(f"{where}: {str(value)[:60]!r} is not one of {sorted(allowed)}")
    return value


def _num(value: Any, low: float, high: float, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise RefusedError(f"{where}: {str(value)[:60]!r} is not a number in [{low}, {high}]")
    return value


def _count(value: Any, high: int, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise RefusedError(f"{where}: {str(value)[:60]!r} is not a whole number in [1, {high}]")
    return value


def _argv(raw: Any, where: str) -> tuple[list[str], str]:
    if not isinstance(raw, list) or len(raw) > 64 or not all(isinstance(x, str) for x in raw):
        raise RefusedError(f"{where}: engine_launched has no argv (a list of at most 64 strings)")
    if raw[:3] == STANDIN:
        raw, model, i = ["serve", STANDIN_MODEL, *raw[3:]], STANDIN_MODEL, 2
    elif len(raw) >= 2 and raw[0] == "serve" and VALUE.fullmatch(raw[1].rsplit("/", 1)[-1]):
        model, i = raw[1], 2
    else:
        raise RefusedError(f"{where}: argv is not `serve MODEL ...`")
    out = ["serve", "{model}"]
    while i < len(raw):
        flag = raw[i]
        if flag in ("--port", "--variant"):  # the script picks its port; a stand-in's bug is the tester's choice
            out += ["--port", "{port}"] if flag == "--port" else []
            i += 2
            continue
        _word(flag, FLAGS, f"{where}: argv[{i}]")
        out.append(flag)
        if flag == "--kv-transfer-config":
            out.append(_kv_config(raw[i + 1] if i + 1 < len(raw) else "", f"{where}: argv[{i + 1}]"))
            i += 2
            continue
        if FLAGS[flag]:
            value = raw[i + 1] if i + 1 < len(raw) else ""
            if not VALUE.fullmatch(value):
                raise RefusedError(f"{where}: argv[{i + 1}]: {value[:60]!r} is no plain value of {flag}")
            out.append(value)
            i += 1
        i += 1
    return out, model


def _kv_config(value: str, where: str) -> str:
    """--kv-transfer-config's value: a JSON object of KV_CONFIG's keys and values, written anew (never the run's
    text)."""
    try:
        cfg = json.loads(value) if len(value) <= MAX_KV_CONFIG else None
    except ValueError:
        cfg = None
    if not isinstance(cfg, dict) or not cfg:
        raise RefusedError(f"{where}: {value[:60]!r} is no JSON object of at most {MAX_KV_CONFIG} characters "
                           "(--kv-transfer-config)")
    for key, val in cfg.items():
        _word(key, KV_CONFIG, f"{where}: --kv-transfer-config key")
        _word(val, KV_CONFIG[key], f"{where}: --kv-transfer-config {key}")
    return json.dumps({k: cfg[k] for k in KV_CONFIG if k in cfg})


def _port(value: Any, where: str) -> int:
    if not isinstance(value, str) or not PORT.fullmatch(value) or int(value) > 65535:
        raise RefusedError(f"{where}: {str(value)[:60]!r} is not a port number (1 to 65535)")
    return int(value)


def _env(raw: Any, held: int | None, where: str) -> dict[str, str]:
    """engine_launched's ``env``: ENV's variables only; the side channel's port as HELD where it is the port the
    run's hold_port step held."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or len(raw) > len(ENV):
        raise RefusedError(f"{where}: env is not an object of at most {len(ENV)} variables")
    out = {}
    for name, value in raw.items():
        _word(name, ENV, f"{where}: env")
        if ENV[name] == "port":
            out[name] = HELD if _port(value, f"{where}: env {name}") == held else value
        else:
            out[name] = _word(value, ENV[name], f"{where}: env {name}")
    return out


def _step(data: Any, where: str) -> dict[str, Any]:
    kind = _word(data.get("kind"), STEP_KINDS, f"{where}: kind")
    step: dict[str, Any] = {"kind": kind}
    if kind == "engine_request":
        step["max_tokens"] = int(_num(data.get("max_tokens"), 1, 4096, f"{where}: max_tokens"))
        step["stream"] = data.get("stream") is True
        faults = [f for f in CLIENT_FAULTS if data.get(f) is not None]
        if faults and (not step["stream"] or len(faults) > 1):
            raise RefusedError(f"{where}: {' and '.join(faults)}: a client fault of a stream, one at most")
        for fault in faults:
            step[fault] = _count(data.get(fault), MAX_COUNT, f"{where}: {fault}")
        if "stop_reading_after" in faults:  # the run's receive window: what the server writes backs up soon
            step["rcvbuf"] = STALLED_RCVBUF
    elif kind == "engine_signal":
        step["to"] = _word(data.get("to"), ROLES, f"{where}: to")
        step["sig"] = _word(data.get("sig"), SIGNALS, f"{where}: sig")
    elif kind == "wait_gone":
        step["timeout"] = float(_num(data.get("timeout"), 0, 600, f"{where}: timeout"))
    elif kind == "hold_port":
        step["port"] = int(_num(data.get("port"), 0, 65535, f"{where}: port"))
    return step


def params_of(run_dir: Path) -> dict[str, Any]:
    """The allow-listed fields of a run dir.  Raises RefusedError (its one located line)."""
    meta, problems = read_meta(run_dir / "verdicts.json")
    if problems or not meta:
        raise RefusedError(f"{run_dir / 'verdicts.json'}: {(problems or ['missing'])[0]}")
    scenario = _word(meta.get("scenario"), FINDINGS, f"{run_dir / 'verdicts.json'}: scenario")
    hist = run_dir / "history.jsonl"
    try:
        text = read_text(hist, MAX_HISTORY_BYTES, "history.jsonl")
    except ArtifactError as exc:
        raise RefusedError(str(exc)) from None
    argv: list[str] | None = None
    model, steps, env, held = "", [], {}, None
    for n, line, _last in lines_of(text):
        doc, why = check_line(line)
        if doc is None:
            raise RefusedError(f"{hist}:{n}: {why}")
        data, where = doc["data"], f"{hist}:{n}"
        if doc["kind"] == "engine_launched" and argv is None:
            argv, model = _argv(data.get("argv"), where)
            env = _env(data.get("env"), held, where)
        elif doc["kind"] == "step_started":
            steps.append(_step(data, where))
            if steps[-1]["kind"] == "hold_port" and (argv is not None or len(steps) > 1):
                raise RefusedError(f"{where}: a hold_port step after another step or the launch (a reproducer "
                                   "holds its port first)")
        elif doc["kind"] == "step_returned" and data.get("kind") == "hold_port" and data.get("ok") is True:
            held = int(_num(data.get("value"), 1, 65535, f"{where}: the held port"))
    if argv is None or not steps or len(steps) > MAX_STEPS:
        raise RefusedError(f"{hist}: no engine_launched event, or no steps (or more than {MAX_STEPS})")
    check, about, _checker = FINDINGS[scenario]
    if check == "start_hangs" and (steps[0]["kind"] != "hold_port"
                                   or env.get("VLLM_NIXL_SIDE_CHANNEL_PORT") != HELD):
        raise RefusedError(f"{hist}: {scenario} holds no port before the launch, or its engine_launched env does "
                           "not give the engine the held port (VLLM_NIXL_SIDE_CHANNEL_PORT)")
    if check == "stream_hangs" and not any(s["kind"] == "engine_request" and s["stream"]
                                           and "disconnect_after" not in s for s in steps):
        raise RefusedError(f"{hist}: {scenario} has no stream that stays in flight (a stream request without "
                           "disconnect_after)")
    return {"scenario": scenario, "about": about, "check": check, "model": model, "argv": argv, "env": env,
            "launcher_env": dict(VLLM_ENV), "stream_s": STREAM_S, "after_failure_s": AFTER_FAILURE_S,
            "steps": [s for s in steps if s["kind"] != "engine_restart"]}


def build(params: dict[str, Any]) -> str:
    """The script's text; its first statement is the one literal, checked to be nothing else."""
    head = f"#!/usr/bin/env python3\n# Reproduces {params['scenario']!r}: written by `lastcall repro`.\n"
    text = head + "PARAMS = " + repr(params) + "\n" + BODY
    first = ast.parse(text).body[0]
    if not isinstance(first, ast.Assign) or not all(
            isinstance(n, (ast.Dict, ast.List, ast.Constant, ast.Load)) for n in ast.walk(first.value)):
        raise RefusedError(f"{params.get('scenario')!r}: the parameters are not one literal")
    return text


def main(run_dir: str, out: str | None, model: str | None) -> int:
    try:
        params = params_of(Path(run_dir))
    except RefusedError as exc:
        print(f"lastcall repro: {exc}", file=sys.stderr)
        return 2
    if model:
        params["model"] = model
    text = build(params)
    if out:
        Path(out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0
