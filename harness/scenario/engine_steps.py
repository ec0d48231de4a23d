"""The step kinds of an engine run (cast ``engine``): a real engine's process tree, driven from outside.

The tree (``vllm serve``, or the stand-in engine) is launched by the harness itself when the run starts
(``- start: engine``; harness.engine.host, kept by the cluster as its ``host``), in the run's directory, on a
free port, under the run's watchdog.  Its steps, each recorded under its own kind with its category
(harness.categories), judged by the black-box checkers of harness.checkers.engine:

* ``engine_request`` (request): one completion over HTTP, streamed or not, maybe in the background; its value
  is how it ended: ``complete``, ``aborted`` (finish_reason abort), ``refused`` (an HTTP error status),
  ``cut`` (the connection closed before the end), ``disconnected`` (the harness closed it on purpose),
  ``not_sent`` (it waited for a shutdown that never began) or ``hung`` (no answer within its safety net);
  ``tokens``: what was generated for it (text chunks of a stream, completion tokens otherwise).  A stream's
  first event is recorded as ``engine_stream_started`` (``wait: {event: engine_stream_started}``).  Client
  faults: ``stop_reading_after: N`` (``engine_client_stalled``: it stops reading until the tree is gone),
  ``disconnect_after: N`` (``engine_client_disconnected``), ``after_shutdown_began`` (a late request: sent
  once the engine's own line said its shutdown began, ``engine_shutdown_began``).
* ``engine_signal`` (signal): SIGTERM / SIGINT / SIGKILL to the API server, the engine core or a worker (by
  its process name, VLLM::EngineCore / VLLM::Worker; ``index``: its tensor-parallel rank), after a snapshot
  ``before_<name>`` of the live tree.  It watches the engine's output for its shutdown line from then on, and
  releases a held start gate (``engine_start``) once the signal is sent.
* ``wait_gone`` (sync): waits (pidfds) until no process of the tree is left; its value: ``gone``, ``seconds``
  since the last signal, ``survivors``, ``orphaned`` (reparented to the harness while alive), the API
  server's exit ``status``, and ``left``: the files under the tree's TMPDIR and the /dev/shm segments its
  processes held when ready that still exist.
* ``engine_restart`` (start): launches again on the same port; ok once ready, else its error.
* ``engine_start`` (start): launches again without waiting for ready; returns once the engine is starting
  (``engine_starting``), its start's end recorded in the background (ok once ready; ``stopped``: the launch
  had a stop signal before it was ready).

Registered in harness.scenario.player's registry on import (harness.scenario.runner imports this module).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import select
import signal
import socket
import stat
import time
from dataclasses import dataclass
from typing import Any

from harness.engine.host import EngineHost, members_data
from harness.engine.standin import GATE
from harness.engine.tree import EngineStartError, EngineTree, Member
from harness.history import Event
from harness.launch.parts import Cast, Part, register_cast
from harness.probes.snapshot import take
from harness.scenario.player import Player, StepError, step_kind
from harness.timeouts import scaled

__all__ = ["EngineRunState", "PROCESS_NAMES", "ENGINE", "SHUTDOWN_RX"]


ENGINE = register_cast(Cast("engine", (Part("engine", "engine_tree", needs="engine_command"),),
                            "a real engine's process tree (vllm serve, or the stand-in engine), launched by the "
                            "harness itself", host=EngineHost))
PROCESS_NAMES = {"engine_core": r"^VLLM::EngineCor", "worker": r"^VLLM::Worker"}  # the kernel keeps 15 bytes
SHUTDOWN_RX = re.compile(r"\[shutdown\] API server: shutdown triggered")  # vLLM's line (the stand-in's too)
STALLED_RCVBUF = 4096  # a stalled reader's receive buffer: the server's writes back up soon
_TP_RANK = re.compile(rb"_TP(\d+)")


@dataclass
class EngineRunState:
    """What an engine run's steps share."""

    signal_t: float = 0.0  # monotonic time of the last engine_signal (0: none yet)
    signal_step: str = ""
    gate: socket.socket | None = None  # a held start gate's connection (engine_start), released by a signal

    def release_gate(self) -> None:
        if self.gate is not None:
            self.gate.close()
            self.gate = None


def _host(pl: Player) -> EngineHost:
    host = pl.c.host
    if not isinstance(host, EngineHost):
        raise StepError(f"a {pl.c.cast.name} run has no engine tree; engine steps need an engine run")
    pl.snaps.update(host.snaps)
    pl.ports["engine"] = host.port
    return host


# ---------------------------------------------------------------- requests
def _connect(host: EngineHost, s: Any) -> http.client.HTTPConnection:
    conn = http.client.HTTPConnection("127.0.0.1", host.port, timeout=host.scaled(s.timeout))
    if s.stop_reading_after:  # a small window: what the server writes backs up into its own buffers
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, STALLED_RCVBUF)
        sock.settimeout(host.scaled(s.timeout))
        sock.connect(("127.0.0.1", host.port))
        conn.sock = sock
    return conn


def _stall(pl: Player, s: Any, name: str, events: int, since: int) -> str:
    """Stop reading until the tree is gone (a wait_gone step returned) or the safety net; what ended it."""
    pl.emit("engine_client_stalled", step=name, events=events)
    seen = pl.c.rec.wait_for(lambda e: e.kind == "step_returned" and e.data.get("kind") == "wait_gone",
                             pl.c.host.scaled(s.timeout), after=since)
    return "tree_gone" if seen is not None else "timeout"


def _outcome(pl: Player, host: EngineHost, s: Any, name: str) -> dict[str, Any]:
    body = json.dumps({"model": host.model, "prompt": "hello", "max_tokens": s.max_tokens, "stream": s.stream})
    conn = _connect(host, s)
    since = len(pl.c.rec.events())
    extra: dict[str, Any] = {}
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            return {"outcome": "refused", "status": resp.status, "tokens": 0,
                    "error": resp.read().decode("utf-8", "replace")[:200]}
        if not s.stream:
            answer = json.loads(resp.read())
            reason = answer["choices"][0].get("finish_reason")
            return {"outcome": "aborted" if reason == "abort" else "complete", "status": 200, "finish_reason": reason,
                    "tokens": answer.get("usage", {}).get("completion_tokens")}
        reason, events, tokens, done = None, 0, 0, False
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
                tokens += 1 if choice.get("text") else 0
            if "error" in chunk:
                return {"outcome": "refused", "status": 200, "events": events, "tokens": tokens,
                        "error": str(chunk["error"])[:200]}
            if s.disconnect_after and events >= s.disconnect_after:
                pl.emit("engine_client_disconnected", step=name, events=events)
                return {"outcome": "disconnected", "status": 200, "events": events, "tokens": tokens}
            if s.stop_reading_after and events == s.stop_reading_after:
                extra = {"stopped_reading_after": events, "resumed": _stall(pl, s, name, events, since)}
        if not done:
            return {"outcome": "cut", "status": 200, "events": events, "tokens": tokens, "finish_reason": reason,
                    **extra}
        return {"outcome": "aborted" if reason == "abort" else "complete", "status": 200, "events": events,
                "tokens": tokens, "finish_reason": reason, **extra}
    except TimeoutError:
        return {"outcome": "hung", "status": None, "error": f"no answer in {host.scaled(s.timeout):.1f}s", **extra}
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return {"outcome": "cut", "status": None, "error": f"{type(exc).__name__}: {exc}", **extra}
    finally:
        conn.close()


def _shutdown_began(pl: Player, s: Any) -> Event | None:
    """The engine's own line that its shutdown began, after the last engine_signal (None: not in time).

    Looked for from the signal step's start, not its return: the line is watched for from before the signal is
    sent, and the tree's reader thread can record it before the step's own return is appended (seen on real
    vLLM: the line 47 ms after the return's timestamp but before it in the history, so a wait from the return
    never saw it and a late request waited out its whole timeout)."""
    signals = [i for i, e in enumerate(pl.c.rec.events())
               if e.kind == "step_started" and e.data.get("kind") == "engine_signal"]
    if not signals:
        raise StepError("engine_request after_shutdown_began: no engine_signal before it (nothing began a shutdown)")
    return pl.c.rec.wait_for("engine_shutdown_began", pl.c.host.scaled(s.timeout), after=signals[-1])


@step_kind("engine_request")
def engine_request(pl: Player, s: Any, name: str) -> None:
    host = _host(pl)
    data = {"stream": s.stream, "max_tokens": s.max_tokens}
    for key in ("stop_reading_after", "disconnect_after"):
        if getattr(s, key):
            data[key] = getattr(s, key)
    if s.after_shutdown_began:
        data["after_shutdown_began"] = True

    def ask() -> None:
        if s.after_shutdown_began and _shutdown_began(pl, s) is None:
            value = {"outcome": "not_sent", "status": None, "error": "the engine never said its shutdown began"}
            pl.started(name, "engine_request", **data)
        else:
            pl.started(name, "engine_request", **data)
            value = _outcome(pl, host, s, name)
        pl.returned(name, "engine_request", value["outcome"] not in ("hung", "not_sent"), value, **data)

    if s.background:
        pl.background(name, ask, join=2 * host.scaled(s.timeout) + scaled(5))
    else:
        ask()


# ----------------------------------------------------------------- signals
def _rank(m: Member) -> tuple[int, int]:
    """A worker's tensor-parallel rank by its title (vLLM's setproctitle: VLLM::Worker_TP1), else its start
    order (its pid)."""
    try:
        with open(f"/proc/{m.pid}/cmdline", "rb") as f:
            found = _TP_RANK.search(f.read())
    except OSError:
        found = None
    return (int(found.group(1)) if found else -1, m.pid)


def _pid_of(tree: EngineTree, to: str, index: int = 0, kind: str = "engine_signal") -> tuple[int, str]:
    """The pid and name of the tree's process ``to`` (``index``: which worker); a StepError of step ``kind``
    names what the tree has instead."""
    if to == "api_server":
        assert tree.proc is not None
        if tree.proc.poll() is not None:
            raise StepError(f"{kind}: the API server has already exited")
        return tree.proc.pid, "api_server"
    found = sorted(tree.find(PROCESS_NAMES[to]), key=_rank)
    if not found:
        raise StepError(f"{kind}: no live {to} in the tree (its processes: "
                        f"{', '.join(m.name for m in tree.members()) or 'none'})")
    if index >= len(found):
        raise StepError(f"{kind}: no {to} {index}: the tree has {len(found)} ({_names(found)})")
    return found[index].pid, found[index].name


def _names(ms: list[Member]) -> str:
    return ", ".join(f"{m.name} pid {m.pid}" for m in ms)


def _watch_shutdown(pl: Player, tree: EngineTree, step: str) -> None:
    """From now on, the engine's own shutdown line is recorded (``engine_shutdown_began``), once per tree."""
    before = tree.on_line
    if getattr(before, "lastcall_shutdown_watch", False):
        return
    said: list[str] = []

    def on_line(line: str) -> None:
        if before is not None:
            before(line)
        if not said and SHUTDOWN_RX.search(line):
            said.append(line)
            pl.emit("engine_shutdown_began", step=step, line=line.strip()[:200])

    on_line.lastcall_shutdown_watch = True  # type: ignore[attr-defined]
    tree.on_line = on_line


@step_kind("engine_signal")
def engine_signal(pl: Player, s: Any, name: str) -> None:
    host = _host(pl)
    tree = host.tree
    pid, pname = _pid_of(tree, s.to, s.index)
    members = tree.members()
    label = f"before_{name}"  # the live tree, by identity: what is left later is attributable to its holder
    pl.snaps[label] = take(label, root=tree.tmp, pids=[m.pid for m in members], ports=(host.port,),
                           unix_under=tree.tmp, gpu=False)
    st = pl.scratch(EngineRunState)
    ready = tree.ready_at is not None
    pl.started(name, "engine_signal", to=s.to, sig=s.sig, pid=pid, process=pname, members=members_data(members),
               index=s.index, ready=ready)
    _watch_shutdown(pl, tree, name)
    st.signal_t, st.signal_step = time.monotonic(), name
    tree.signal(getattr(signal, s.sig), pid)
    host.watch(tree, members)  # when each process exits, from now on: wait_gone reports the tree's own time
    st.release_gate()  # a start held at its gate goes on, as a real engine's start would
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


@step_kind("wait_gone")
def wait_gone(pl: Player, s: Any, name: str) -> None:
    host = _host(pl)
    tree = host.tree
    st = pl.scratch(EngineRunState)
    st.release_gate()
    since = st.signal_t or time.monotonic()
    leader = tree.proc.pid if tree.proc is not None else -1
    orphaned: dict[int, str] = {}

    def seen(live: list[Any]) -> None:
        for m in live:
            if m.pid != leader and m.ppid == os.getpid():
                orphaned[m.pid] = m.name

    pl.started(name, "wait_gone", timeout=host.scaled(s.timeout), after=st.signal_step)
    watch = host.gone_watch if st.signal_t and host.gone_watch is not None and host.gone_watch.tree is tree else None
    if watch is not None:  # watched since the signal: the tree's own time, however late this step began
        watch.done.wait(host.scaled(s.timeout))
        gone = tree.wait_gone(0.0, seen)  # one last read: reaps what was reparented here, the leader's status
        orphaned.update(watch.orphaned)  # every orphan seen since the signal
    else:
        gone = tree.wait_gone(host.scaled(s.timeout), seen)
    now = time.monotonic()
    seconds = watch.seconds_since(since, now) if watch is not None and gone else now - since
    survivors = members_data([m for m in tree.members() if m.state != "Z"])
    value = {"gone": gone, "seconds": round(seconds, 3), "survivors": survivors,
             "orphaned": [{"pid": p, "name": n} for p, n in sorted(orphaned.items())],
             "status": tree.returncode, "left": _left(pl, tree), "after": st.signal_step}
    pl.returned(name, "wait_gone", True, value)


def _bindable(port: int) -> bool:
    """What the kernel says of the port just before a launch."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@step_kind("engine_restart")
def engine_restart(pl: Player, s: Any, name: str) -> None:
    host = _host(pl)
    pl.started(name, "engine_restart", port=host.port)
    bindable = _bindable(host.port)
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


# ------------------------------------------------------------ a start in flight
def _gate(pl: Player, host: EngineHost) -> socket.socket | None:
    """The start gate of the next launch: a Unix socket in its run directory (the tree's cwd) that the stand-in
    engine's engine core connects to and waits on while it loads; None for an engine that does not take it."""
    if getattr(host.target, "kind", "") != "standin":
        return None
    run_dir = pl.c.root / f"e{len(host.trees)}"  # host.launch's directory of the next launch
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / GATE
    if len(os.fsencode(path)) > 100:
        raise StepError(f"engine_start: the start gate's path is too long for a Unix socket: {path}")
    gate = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    gate.bind(str(path))
    gate.listen(1)
    return gate


@step_kind("engine_start")
def engine_start(pl: Player, s: Any, name: str) -> None:
    host = _host(pl)
    st = pl.scratch(EngineRunState)
    st.release_gate()
    gate = _gate(pl, host)
    n = len(host.trees)
    pl.started(name, "engine_start", port=host.port, launch=n, gated=gate is not None)
    bindable = _bindable(host.port)
    ended_r, ended_w = os.pipe()

    def launch() -> None:
        try:
            tree = host.launch()
        except EngineStartError as exc:
            stopped = _signalled_during(pl, name)
            pl.returned(name, "engine_start", stopped, {"ready": False, "bindable": bindable, "stopped": stopped,
                                                        "status": host.trees[-1].returncode if host.trees else None},
                        error=str(exc).splitlines()[0], port=host.port)
        else:
            assert tree.ready_at is not None and tree.started_at is not None
            pl.returned(name, "engine_start", True, {"ready": True, "bindable": bindable,
                                                     "stopped": _signalled_during(pl, name),
                                                     "ready_s": round(tree.ready_at - tree.started_at, 3)},
                        port=host.port)
        finally:
            os.close(ended_w)

    st.signal_t, st.signal_step = 0.0, ""
    pl.background(name, launch, join=host.launch_s + scaled(5))
    try:
        if gate is None:  # another engine: starting once its process is launched (its start takes long)
            launched = pl.c.rec.wait_for(lambda e: e.kind == "engine_launched" and e.data.get("launch") == n,
                                         host.scaled(s.timeout))
            pl.emit("engine_starting", step=name, gated=False, launched=launched is not None)
            return
        readable, _, _ = select.select([gate.fileno(), ended_r], [], [], host.scaled(s.timeout))
        if gate.fileno() in readable:
            st.gate, _ = gate.accept()  # its engine core is loading, behind the gate: the tree is starting
        pl.emit("engine_starting", step=name, gated=st.gate is not None)
    finally:
        os.close(ended_r)
        if gate is not None:
            gate.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(pl.c.root / f"e{n}" / GATE)


def _signalled_during(pl: Player, start: str) -> bool:
    """Whether a stop signal (SIGTERM, SIGINT) went to the API server between ``start``'s start and now."""
    began = False
    for e in pl.c.rec.events("step_started"):
        if e.data.get("step") == start and e.data.get("kind") == "engine_start":
            began = True
        elif began and e.data.get("kind") == "engine_signal" and e.data.get("to") == "api_server" \
                and e.data.get("sig") in ("SIGTERM", "SIGINT"):
            return True
    return False
