"""The step kinds of an engine run (cast ``engine``): a real engine's process tree, driven from outside.

The tree (``vllm serve``, or the stand-in engine) is launched by the harness itself when the run starts
(``- start: engine``; harness.engine.host, kept by the cluster as its ``host``), in the run's directory, on a
free port, under the run's watchdog.  Its steps, each recorded under its own kind with its category
(harness.categories), judged by the black-box checkers of harness.checkers.engine:

* ``engine_request`` (request): one completion over HTTP, streamed or not, maybe in the background; its value
  is how it ended: ``complete``, ``aborted`` (finish_reason abort), ``refused`` (an HTTP error status),
  ``cut`` (the connection closed before the end) or ``hung`` (no answer within its safety net).  A stream's
  first event is recorded as ``engine_stream_started`` (``wait: {event: engine_stream_started}``).
* ``engine_signal`` (signal): SIGTERM / SIGINT / SIGKILL to the API server, the engine core or a worker (by
  its process name, VLLM::EngineCore / VLLM::Worker), after a snapshot ``before_<name>`` of the live tree.
* ``wait_gone`` (sync): waits (pidfds) until no process of the tree is left; its value: ``gone``, ``seconds``
  since the last signal, ``survivors``, ``orphaned`` (reparented to the harness while alive), the API
  server's exit ``status``, and ``left``: the files under the tree's TMPDIR and the /dev/shm segments its
  processes held when ready that still exist.
* ``engine_restart`` (start): launches again on the same port; ok once ready, else its error.

Registered in harness.scenario.player's registry on import (harness.scenario.runner imports this module).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import stat
import time
from dataclasses import dataclass
from typing import Any

from harness.engine.host import EngineHost, members_data
from harness.engine.tree import EngineStartError, EngineTree
from harness.launch.parts import Cast, Part, register_cast
from harness.probes.snapshot import take
from harness.scenario.player import Player, StepError, step_kind
from harness.timeouts import scaled

__all__ = ["EngineRunState", "PROCESS_NAMES", "ENGINE"]

E = "engine"
ENGINE = register_cast(Cast(E, (Part("engine", "engine_tree", needs="engine_command"),),
                            "a real engine's process tree (vllm serve, or the stand-in engine), launched by the "
                            "harness itself", host=EngineHost))
PROCESS_NAMES = {"engine_core": r"^VLLM::EngineCor", "worker": r"^VLLM::Worker"}  # the kernel keeps 15 bytes


@dataclass
class EngineRunState:
    """What an engine run's steps share."""

    signal_t: float = 0.0  # monotonic time of the last engine_signal (0: none yet)
    signal_step: str = ""


def _host(pl: Player) -> EngineHost:
    host = pl.c.host
    if not isinstance(host, EngineHost):
        raise StepError(f"a {pl.c.cast.name} run has no engine tree; engine steps need an engine run")
    pl.snaps.update(host.snaps)
    pl.ports["engine"] = host.port
    return host


# ---------------------------------------------------------------- requests
def _outcome(pl: Player, host: EngineHost, s: Any, name: str) -> dict[str, Any]:
    body = json.dumps({"model": host.model, "prompt": "hello", "max_tokens": s.max_tokens, "stream": s.stream})
    conn = http.client.HTTPConnection("127.0.0.1", host.port, timeout=scaled(s.timeout))
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            return {"outcome": "refused", "status": resp.status, "error": resp.read().decode("utf-8", "replace")[:200]}
        if not s.stream:
            answer = json.loads(resp.read())
            reason = answer["choices"][0].get("finish_reason")
            return {"outcome": "aborted" if reason == "abort" else "complete", "status": 200, "finish_reason": reason,
                    "tokens": answer.get("usage", {}).get("completion_tokens")}
        reason, events, done = None, 0, False
        for raw in resp:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            events += 1
            if events == 1:
                pl.emit("engine_stream_started", step=name)
            chunk = json.loads(data)
            for choice in chunk.get("choices", ()):
                reason = choice.get("finish_reason") or reason
            if "error" in chunk:
                return {"outcome": "refused", "status": 200, "events": events, "error": str(chunk["error"])[:200]}
        if not done:
            return {"outcome": "cut", "status": 200, "events": events, "finish_reason": reason}
        return {"outcome": "aborted" if reason == "abort" else "complete", "status": 200, "events": events,
                "finish_reason": reason}
    except TimeoutError:
        return {"outcome": "hung", "status": None, "error": f"no answer in {scaled(s.timeout):.1f}s"}
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return {"outcome": "cut", "status": None, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        conn.close()


@step_kind("engine_request", "request", cast=E)
def engine_request(pl: Player, s: Any, name: str) -> None:
    host = _host(pl)
    data = {"stream": s.stream, "max_tokens": s.max_tokens}
    pl.started(name, "engine_request", **data)

    def ask() -> None:
        value = _outcome(pl, host, s, name)
        pl.returned(name, "engine_request", value["outcome"] != "hung", value, **data)

    if s.background:
        pl.background(name, ask, join=scaled(s.timeout) + scaled(5))
    else:
        ask()


# ----------------------------------------------------------------- signals
def _pid_of(tree: EngineTree, to: str) -> tuple[int, str]:
    if to == "api_server":
        assert tree.proc is not None
        if tree.proc.poll() is not None:
            raise StepError("engine_signal: the API server has already exited")
        return tree.proc.pid, "api_server"
    found = tree.find(PROCESS_NAMES[to])
    if not found:
        raise StepError(f"engine_signal: no live {to} in the tree (its processes: "
                        f"{', '.join(m.name for m in tree.members()) or 'none'})")
    return found[0].pid, found[0].name


@step_kind("engine_signal", "signal", cast=E)
def engine_signal(pl: Player, s: Any, name: str) -> None:
    host = _host(pl)
    tree = host.tree
    pid, pname = _pid_of(tree, s.to)
    members = tree.members()
    label = f"before_{name}"  # the live tree, by identity: what is left later is attributable to its holder
    pl.snaps[label] = take(label, root=tree.tmp, pids=[m.pid for m in members], ports=(host.port,),
                           unix_under=tree.tmp, gpu=False)
    st = pl.scratch(EngineRunState)
    pl.started(name, "engine_signal", to=s.to, sig=s.sig, pid=pid, process=pname, members=members_data(members))
    st.signal_t, st.signal_step = time.monotonic(), name
    tree.signal(getattr(signal, s.sig), pid)
    pl.returned(name, "engine_signal", True, pid, to=s.to, sig=s.sig)


# ----------------------------------------------------------------- the end
def _left(pl: Player, tree: EngineTree) -> list[dict[str, str]]:
    """What is left of the tree: files under its TMPDIR (socket or file), and shm segments it held when ready."""
    out = []
    for p in sorted(tree.tmp.rglob("*")) if tree.tmp.exists() else ():
        with contextlib.suppress(OSError):
            mode = p.lstat().st_mode
            if not stat.S_ISDIR(mode):
                out.append({"path": str(p), "kind": "socket" if stat.S_ISSOCK(mode) else "file"})
    held = {str(x) for e in pl.c.rec.events("engine_ready") for x in e.data.get("shm", ())}
    return out + [{"path": p, "kind": "shm"} for p in sorted(held) if os.path.exists(p)]


@step_kind("wait_gone", "sync", cast=E)
def wait_gone(pl: Player, s: Any, name: str) -> None:
    host = _host(pl)
    tree = host.tree
    st = pl.scratch(EngineRunState)
    since = st.signal_t or time.monotonic()
    leader = tree.proc.pid if tree.proc is not None else -1
    orphaned: dict[int, str] = {}

    def seen(live: list[Any]) -> None:
        for m in live:
            if m.pid != leader and m.ppid == os.getpid():
                orphaned[m.pid] = m.name

    pl.started(name, "wait_gone", timeout=scaled(s.timeout), after=st.signal_step)
    gone = tree.wait_gone(scaled(s.timeout), seen)
    seconds = time.monotonic() - since
    survivors = members_data([m for m in tree.members() if m.state != "Z"])
    value = {"gone": gone, "seconds": round(seconds, 3), "survivors": survivors,
             "orphaned": [{"pid": p, "name": n} for p, n in sorted(orphaned.items())],
             "status": tree.returncode, "left": _left(pl, tree), "after": st.signal_step}
    pl.returned(name, "wait_gone", True, value)


@step_kind("engine_restart", "start", cast=E)
def engine_restart(pl: Player, s: Any, name: str) -> None:
    host = _host(pl)
    pl.started(name, "engine_restart", port=host.port)
    with socket.socket() as probe:  # what the kernel says of the port just before the launch
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", host.port))
            bindable = True
        except OSError:
            bindable = False
    try:
        tree = host.launch()
    except EngineStartError as exc:
        pl.returned(name, "engine_restart", False, {"ready": False, "bindable": bindable},
                    error=str(exc).splitlines()[0], port=host.port)
        return
    st = pl.scratch(EngineRunState)
    st.signal_t, st.signal_step = 0.0, ""
    pl.snaps.update(host.snaps)
    assert tree.ready_at is not None and tree.started_at is not None
    pl.returned(name, "engine_restart", True, {"ready": True, "bindable": bindable,
                                               "ready_s": round(tree.ready_at - tree.started_at, 3)},
                port=host.port)
