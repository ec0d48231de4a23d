"""A model-based explorer of the reference listener's lifecycle, and the replayable scenario of a failure.

:func:`machine_for` builds a Hypothesis ``RuleBasedStateMachine`` over one real
worker (rank 0, real Unix socket, real serving thread) of a planted-bug
:class:`~harness.reference.variants.Variant`, started in a private registry by
:class:`~harness.contract.rig.Rig`.  Its rules are what a client and an operator
do: connect, send a header and withhold the body, send the body, park a handler
inside the backend (a failpoint), release it, stop, stop concurrently, stop with
a failing cleanup, integration shutdown, restart, remove or replace the socket
file.  After every step the invariants of the stop contract (DESIGN.md) are
checked.

Real threads make plain Hypothesis flaky, so every rule is taken only when it
can complete deterministically (its precondition says when) and returns only
once the listener has shown, by its own history event or a failpoint, that the
step took effect.  Waits have safety timeouts and a few generous "at once"
bounds (the contract's own words); nothing sleeps.

Every rule appends a :class:`TraceStep` to the example's trace as it runs, with
the listener events that happened until the next step: the real interleaving.  A
failure raises :class:`ExplorationFailure`, whose message carries that trace
rendered as a scenario YAML (:func:`render_scenario`) between
:data:`SCENARIO_BEGIN` and :data:`SCENARIO_END` (:func:`scenario_in` cuts it
out): it loads with :mod:`harness.scenario.loader` and replays the interleaving
on real processes with ``lastcall run``, without relying on shrinking (where
steps cannot say what the explorer did, :data:`REPLAY_GAPS`, a comment says so).
:func:`run_steps` replays an explorer trace in-process, without Hypothesis.

::

    TestReference = machine_for(VARIANTS["reference"]).TestCase   # a pytest test
    run_state_machine_as_test(machine_for(VARIANTS["no_conn_tracking"]))  # raises ExplorationFailure
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from harness import failpoints
from harness.checkers import RunRecord, judge
from harness.contract.rig import ContractViolation, Pending, Rig, _force_down
from harness.errors import ListenerBusy
from harness.faults import env
from harness.history import Event
from harness.names import temp_root
from harness.reference import wire
from harness.reference.listener import WorkerListener
from harness.reference.paths import owner_path
from harness.reference.variants import VARIANTS, Variant
from harness.reference.worker import ReferenceWorker
from harness.timeouts import scaled

__all__ = [
    "ExplorationFailure", "ListenerMachine", "TraceStep", "Violation", "machine_for", "render_scenario", "run_steps",
    "scenario_in", "SCENARIO_BEGIN", "SCENARIO_END", "REACHABLE", "UNREACHABLE", "REFERENCE_GAPS", "REPLAY_GAPS",
]

MiB = 1 << 20
MAP: wire.Command = "map_to_kv_tensors"
DRAIN_S = 0.3  # the listener's drain_timeout (scaled): what a stop with nothing parked never needs
SHORT_STOP_S = 0.05  # stop(timeout) while a handler is parked: the drain cannot finish, so False at once
AT_ONCE_S = 0.5  # "at once" (scaled): a cancelled read reads EOF, a stopped thread is gone
SERVE_S = 2.0  # (scaled) a new connection is accepted and read while other clients idle or stall
SCENARIO_BEGIN = "----- replayable scenario (harness.explore) -----"
SCENARIO_END = "----- end of scenario -----"
ACTIVE_KINDS = frozenset({  # listener events worth showing in the recorded interleaving
    "accepted", "accepted_after_stop", "frame_started", "frame_completed", "dispatch_started", "dispatch_refused",
    "dispatch_finished", "connection_closed", "stop_started", "reads_cancelled", "drain_started",
    "drain_finished", "teardown_step", "cleanup_failed", "stop_returned", "thread_exited", "thread_crashed",
    "listener_started", "stale_socket_removed", "fault_reached", "teardown_deferred", "allocator_torn_down",
    "reply_failed",
})

# Which planted bugs the explorer finds, and why it cannot reach the others (tests/test_stateful.py proves the first).
REACHABLE: dict[str, str] = {
    "no_conn_tracking": "connect or send_header, park, stop: the idle or stalled read is not closed at once",
    "teardown_while_alive": "park, stop: stop returns True while the handler is parked",
    "timed_join_teardown": "park, stop: stop returns True after its timed join, handler still parked",
    "wake_by_connect": "remove_path or replace_path, stop: the wake-up never arrives, stop returns False",
    "dispatch_after_stop": "park (queued), stop, release: the request queued behind the handler is dispatched",
    "head_of_line_blocking": "connect, then connect/send_header/park: the next client is not served",
    "restart_drops_old": "park, restart: the registry drops the draining listener instead of raising ListenerBusy",
    "unlink_by_path": "replace_path, stop: teardown unlinks the socket that replaced ours",
    "drop_registration_on_error": "stop_cleanup_fails: the failed stop drops the registration",
    "concurrent_stop_true": "park, concurrent_stop: the second stop reports True while the first drains",
    "teardown_ignores_stop": "park, shutdown: the allocator is torn down although the stop returned False",
}
UNREACHABLE: dict[str, str] = {
    "rmtree_dir": "needs a second rank sharing the socket directory; the explorer runs one worker",
    "dies_on_bad_frame": "needs malformed input; the explorer sends only well-formed frames (tests/test_listener "
                         "covers bad input)",
    "stop_from_handler_deadlocks": "needs a backend that calls stop(); the explorer's backend is the allocator",
    "unbounded_exit_hook": "needs interpreter exit; the explorer does not model the exit hook",
    "teardown_then_false": "not yet modelled: the explorer's False stops park a handler, and its invariants do not "
                           "look for teardown steps inside a failed stop (the retained_for_retry checker does)",
    "lost_unmap": "needs client-side bookkeeping of mapped pages; the explorer does not unmap",
    "leaks_usage_segment": "an engine-side bug; the explorer runs a worker listener only",
    "leaks_a_child": "a process-level bug (no_orphan_processes on real processes); the explorer runs in-process",
    "cuts_drained_reply": "not yet modelled: the explorer's invariants do not require the parked handler's reply "
                          "to arrive after a stop (the calls_answered checker does, on real processes)",
}
# Reachable bugs whose rendered scenario, replayed on real processes, does not catch them (the rest it does).
REPLAY_GAPS: dict[str, str] = {
    "dispatch_after_stop": "the explorer pipelines the queued request on the parked one's connection; scenario steps "
                           "cannot pipeline, so the replay leaves it out (a comment says so)",
    "unlink_by_path": "no checker sees that the socket which replaced ours was unlinked (the explorer checks the "
                      "inode at the path); the replay runs, but nothing in it can fail",
}
# Interleavings where the reference itself breaks the contract; off by default (machine_for's flags turn them on).
REFERENCE_GAPS: dict[str, str] = {}  # none open: the one found here (a freed inode reused) is fixed
LINE_SUSPECTS: dict[int, str] = {  # a failure of contract line N on 'reference' resembles this planted bug
    1: "dispatch_after_stop", 2: "no_conn_tracking", 3: "teardown_while_alive", 4: "teardown_while_alive",
    5: "timed_join_teardown", 6: "drop_registration_on_error", 7: "wake_by_connect", 9: "restart_drops_old",
    10: "teardown_ignores_stop", 11: "head_of_line_blocking",
}


# ------------------------------------------------------------------- failures
class Violation(ContractViolation):
    """A broken line of the stop contract, seen by the explorer; ``line`` is its number in DESIGN.md."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


class ExplorationFailure(ContractViolation):
    """An example broke the contract (or a step could not complete); the message has the replayable scenario."""

    def __init__(self, message: str, scenario: str, line: int | None) -> None:
        super().__init__(f"{message}\n\n{SCENARIO_BEGIN}\n{scenario}{SCENARIO_END}")
        self.scenario = scenario
        self.line = line


def scenario_in(text: str) -> str | None:
    """The scenario YAML inside a failure's text (an :class:`ExplorationFailure` message), or None."""
    start = text.find(SCENARIO_BEGIN)
    end = text.find(SCENARIO_END, start)
    if start < 0 or end < 0:
        return None
    return text[start + len(SCENARIO_BEGIN):end].lstrip("\n")


# ---------------------------------------------------------------------- trace
@dataclass
class TraceStep:
    """One rule as it ran: its kind, its arguments, and the listener events it saw (filled as the run goes)."""

    kind: str
    args: dict[str, Any] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)


def _offsets(offsets: Sequence[int]) -> str:
    return "[" + ", ".join(f"{o // MiB}MiB" if o else "0" for o in offsets) + "]"


def _seconds(s: float) -> str:
    return f"{round(s * 1000)}ms" if s < 1 else f"{s:g}s"


_R0 = "{rank: 0}"


def _steps_of(step: TraceStep) -> list[str]:
    """The scenario steps (YAML lines, without the list indent) that replay one explorer step.

    A step that began a stop is followed by a ``wait: closed`` for each connection the
    explorer then checked for EOF, bounded as the explorer's check was: in the replay a
    read that is not cancelled at once shows as a late close (reads_cancelled judges it).
    """
    closes = [f"- wait: {{closed: {n}, timeout: {_seconds(2 * AT_ONCE_S)}}}" for n in step.args.get("closes", [])]
    return _lines_of(step) + closes


def _lines_of(step: TraceStep) -> list[str]:
    a = step.args
    k = step.kind
    if k == "connect":
        return [f"- idle: {{to: {_R0}, count: 1, as: {a['name']}}}", f"- wait: {{event: accepted, on: {_R0}}}"]
    if k == "send_header":
        return [f"- send: {{to: {_R0}, cmd: {MAP}, offsets: {_offsets(a['offsets'])}, fault: stall_after_header, "
                f"as: {a['name']}}}", f"- wait: {{event: frame_started, on: {_R0}}}"]
    if k == "send_body":
        return [f"- finish: {a['name']}"]
    if k == "park":
        out = [f"- arm: {{site: backend.{MAP}, on: {_R0}, action: pause, count: 1, as: {a['fault']}}}"]
        if a.get("queued"):
            out.append(f"# explorer: a second map, offsets {_offsets(a['queued'])}, was pipelined behind this one "
                       f"on its connection; steps cannot pipeline a request, so the replay leaves it out (and "
                       f"cannot show what happens to it)")
        return [*out, f"- call: {{op: map, offsets: {_offsets(a['offsets'])}, as: {a['call']}}}",
                f"- wait: {{reached: {a['fault']}}}"]
    if k == "release":
        return [f"- release: {a['fault']}", f"- wait: {{returned: {a['call']}}}",
                *[f"- wait: {{returned: {s}}}" for s in a.get("stops", [])]]
    if k == "stop":
        timeout = "" if a.get("timeout") is None else f", timeout: {_seconds(a['timeout'])}"
        return [f"- stop: {{on: {_R0}{timeout}, as: {a['name']}}}", f"- wait: {{returned: {a['name']}}}"]
    if k == "stop_cleanup_fails":
        return [f"- arm: {{site: cleanup.unlink, on: {_R0}, action: raise, count: 1, as: {a['fault']}}}",
                f"- stop: {{on: {_R0}, as: {a['name']}}}", f"- wait: {{returned: {a['name']}}}"]
    if k == "concurrent_stop":
        return [f"- stop: {{on: {_R0}, timeout: {_seconds(a['timeout_first'])}, as: {a['first']}}}",
                f"- wait: {{event: drain_started, on: {_R0}}}",
                f"- stop: {{on: {_R0}, timeout: {_seconds(a['timeout'])}, as: {a['second']}}}",
                f"- wait: {{returned: {a['second']}}}"]
    if k == "shutdown":
        return [f"- shutdown: {{on: {_R0}, as: {a['name']}}}", f"- wait: {{returned: {a['name']}}}"]
    if k == "restart":
        return [f"- restart: {{on: {_R0}, as: {a['name']}}}", f"- wait: {{returned: {a['name']}}}"]
    if k == "remove_path":
        return [f"- remove: {{what: socket, of: {_R0}}}"]
    if k == "replace_path":
        return [f"- replace: {{what: socket, of: {_R0}}}"]
    raise ValueError(f"unknown explorer step {k!r}")


def _expect(trace: Sequence[TraceStep], probe: bool = False) -> list[str]:
    """What the contract says the replay must show, from the steps taken (``probe``: the last is a plain request)."""
    out: list[str] = ["- requests_served"] if probe else []
    if probe and any(s.kind in ("connect", "send_header") for s in trace[:-1]):
        out.append("- served_while_stalled")
    stops = parks = shutdowns = 0
    conn_open = cancel_judged = drain_false = cleanup_fault = replaced = False
    for s in trace:
        a = s.args
        if s.kind in ("stop", "stop_cleanup_fails", "shutdown", "restart"):
            out.append(f"- stop_result: {{step: {a['name']}, returns: {str(a['returns']).lower()}}}")
        elif s.kind == "concurrent_stop":
            out.append(f"- stop_result: {{step: {a['first']}, returns: true}}")
            out.append(f"- stop_result: {{step: {a['second']}, returns: false}}")
        is_stop = s.kind in ("stop", "stop_cleanup_fails", "concurrent_stop", "shutdown", "restart")
        stops += is_stop
        cancel_judged = cancel_judged or (is_stop and conn_open)
        conn_open = conn_open or s.kind in ("connect", "send_header")
        shutdowns += s.kind == "shutdown"
        parks += s.kind == "park"
        drain_false = drain_false or (s.kind in ("stop", "shutdown", "restart") and not a["returns"])
        cleanup_fault = cleanup_fault or s.kind == "stop_cleanup_fails"
        replaced = replaced or s.kind == "replace_path"
    if stops:
        out.append("- no_late_dispatch")
        if parks:
            out.append("- handler_drained")
        if cancel_judged:
            out.append(f"- reads_cancelled: {{within: {_seconds(AT_ONCE_S)}}}")  # the checker scales it
        if drain_false and not cleanup_fault:  # a failed cleanup has torn down part of the listener on purpose
            out.append("- retained_for_retry")
    if shutdowns:
        out.append("- teardown_deferred")
    if not replaced:  # the file that replaced the socket is the harness's own, left at the path on purpose
        out.append("- no_leftover_paths")
    return out


def _block(text: str, indent: str = "  ", limit: int = 1500) -> list[str]:
    text = text if len(text) <= limit else text[:limit] + " ..."
    return [indent + line.rstrip() if line.strip() else "" for line in text.splitlines()] or [indent + "-"]


def render_scenario(trace: Sequence[TraceStep], *, variant: str, failure: str = "", line: int | None = None,
                    drain_timeout: float | None = None) -> str:
    """The scenario YAML that replays ``trace`` (the steps an explorer example ran, in order).

    ``variant`` is the planted bug it ran against (``catches``); on ``reference``
    the suspect of the broken contract ``line`` is named instead, and ``about``
    says the reference itself failed.  Each step carries, as comments, the
    listener events that happened until the next one: the real interleaving.
    """
    steps = ["- start: cluster"]
    probe = line == 11 and bool(trace) and trace[-1].kind in ("connect", "send_header", "park")
    for i, s in enumerate(trace):
        shown = ", ".join(f"{k}={v}" for k, v in s.args.items() if v not in (None, False, []))
        steps.append(f"# [{i + 1}] explorer: {s.kind}" + (f" ({shown})" if shown else ""))
        if probe and i == len(trace) - 1:  # the step that was not served: a plain request replays it
            steps.append("# explorer: this client was not served at once; the replay sends a plain request instead, "
                         "which must be served while the others idle or stall")
            steps.append(f"- send: {{to: {_R0}, cmd: kv_tensors_created, as: probe}}")
        else:
            steps += _steps_of(s)
        for j in range(0, len(s.events), 6):
            steps.append("#     listener: " + ", ".join(s.events[j:j + 6]))
    catches = variant if variant in VARIANTS and variant != "reference" else LINE_SUSPECTS.get(line or 0,
                                                                                              "no_conn_tracking")
    digest = hashlib.blake2s("\n".join(steps).encode(), digest_size=3).hexdigest()
    name = f"explored-{variant.replace('_', '-')}-{digest}"
    on = "the reference itself (catches names the nearest planted bug)" if variant == "reference" else variant
    about = (f"Recorded by harness.explore, the lifecycle explorer, on {on}: the steps below are the interleaving "
             f"the example ran, in order, with the listener's events as comments."
             + (f"\nIt failed with: {failure}" if failure else ""))
    drain = scaled(DRAIN_S) if drain_timeout is None else drain_timeout
    lines = [f"name: {name}", "about: |-", *_block(about), f"catches: [{catches}]", "topology: {tp: 1, pp: 1}",
             f"config: {{drain_timeout: {_seconds(drain)}}}", "steps:", *("  " + s for s in steps),
             "expect:", *("  " + e for e in _expect(trace, probe))]
    return "\n".join(lines) + "\n"


def _describe(e: Event) -> str:
    d = e.data
    bits = [f"{k}={d[k]}" for k in ("conn", "ok", "step", "n", "site", "id") if d.get(k) not in (None, "")]
    return e.kind + (f"({' '.join(bits)})" if bits else "")


# -------------------------------------------------------------------- the model
class Phase(Enum):
    SERVING = "serving"  # started, no stop has begun
    STOPPING = "stopping"  # a stop began and returned False (or is still draining): nothing torn down
    STOPPED = "stopped"  # a stop returned True: torn down


class _Conn:
    """A client connection: ``idle`` (nothing sent), ``header`` (4 bytes sent, body withheld), ``kept`` (answered,
    kept alive), ``cancelled`` (a withheld body whose read stop cancelled), ``closed``."""

    def __init__(self, name: str, sock: socket.socket, state: str, cid: int, rest: bytes = b"") -> None:
        self.name = name
        self.sock = sock
        self.state = state
        self.cid = cid
        self.rest = rest


@dataclass
class _Parked:
    fault: str
    call: str
    fp: failpoints.Failpoint
    sock: socket.socket
    cid: int
    pending: Pending
    queued: bool


def _read_replies(sock: socket.socket, n: int) -> list[wire.Reply]:
    out: list[wire.Reply] = []
    try:
        for _ in range(n):
            out.append(wire.decode_reply(wire.recv_frame(sock)))
    except (wire.PeerClosed, OSError):
        pass
    return out


def _is_eof(sock: socket.socket, timeout: float) -> bool:
    """True if the listener closed or shut down ``sock`` within ``timeout`` (data read first is a failure)."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    except OSError:
        return True


def _map(page: int, name: str) -> wire.Request:
    return wire.Request(cmd=MAP, offsets=[page * 2 * MiB], id=name)


class ListenerMachine(RuleBasedStateMachine):
    """The explorer's state machine; :func:`machine_for` makes one per variant (class attributes below)."""

    variant: ClassVar[Variant] = VARIANTS["reference"]
    root_factory: ClassVar[Callable[[], Path]] = staticmethod(temp_root)
    replace_after_failed_cleanup: ClassVar[bool] = False  # also replace the path once the server socket closed

    def __init__(self) -> None:
        super().__init__()
        self.trace: list[TraceStep] = []
        self._marks: list[int] = []
        self._counter: dict[str, int] = {}
        self.root = type(self).root_factory()
        self.rig = Rig(self.variant, self.root, drain_timeout=scaled(DRAIN_S))
        try:
            self.w: ReferenceWorker = self.rig.worker()
        except BaseException:
            self.rig.close()
            shutil.rmtree(self.root, ignore_errors=True)
            raise
        self.listener = self.rig.listener(self.w)
        self.listeners: list[WorkerListener] = [self.listener]
        self.phase = Phase.SERVING
        self.path_state = "ours"  # ours | removed | replaced
        self.replacements: list[socket.socket] = []
        self.replacement_ino: int | None = None
        self.conns: list[_Conn] = []
        self.parked: _Parked | None = None
        self.draining: list[tuple[str, Pending]] = []  # concurrent first stops still waiting for the drain
        self.eof_due: list[_Conn] = []  # connections open when a stop began: each must read EOF at once
        self.server_closed = False  # a stop's cleanup failed after closing the server socket (until a restart)

    # ------------------------------------------------------------- bookkeeping
    def _name(self, prefix: str) -> str:
        n = self._counter.get(prefix, 0) + 1
        self._counter[prefix] = n
        return f"{prefix}{n}"

    def _record(self, kind: str, **args: Any) -> TraceStep:
        self._fill_events()
        step = TraceStep(kind, args)
        self.trace.append(step)
        self._marks.append(self.rig.mark())
        return step

    def _fill_events(self) -> None:
        """Attach to the last step the listener events that happened since it began."""
        if self.trace:
            evs = self.rig.rec.events()[self._marks[-1]:]
            self.trace[-1].events = [_describe(e) for e in evs if e.kind in ACTIVE_KINDS]

    def scenario(self, failure: str = "", line: int | None = None) -> str:
        """The trace so far as a replayable scenario YAML."""
        self._fill_events()
        return render_scenario(self.trace, variant=self.variant.name, failure=failure, line=line,
                               drain_timeout=self.rig.config.drain_timeout)

    @contextmanager
    def _explaining(self, where: str) -> Iterator[None]:
        """Turn any failure inside into an ExplorationFailure that carries the replayable scenario."""
        try:
            yield
        except ExplorationFailure:
            raise
        except Exception as exc:
            line = exc.line if isinstance(exc, Violation) else None
            message = f"{where} on {self.variant.name}: {type(exc).__name__}: {exc}"
            raise ExplorationFailure(message, self.scenario(f"{where}: {exc}", line), line) from exc

    # ---------------------------------------------------------------- helpers
    def _wait(self, match: Callable[[Event], bool], after: int, what: str, bound: float | None = None,
              line: int | None = None) -> Event:
        limit = scaled(bound) if bound is not None else scaled()
        ev = self.rig.rec.wait_for(match, limit, after=after)
        if ev is None:
            if line is not None:
                raise Violation(line, f"the listener did not {what} within {limit:.1f}s")
            raise ContractViolation(f"the listener did not {what} within the {limit:.0f}s safety timeout")
        return ev

    def _accepted(self, mark: int) -> int:
        ev = self._wait(lambda e: e.kind == "accepted", mark, "accept a new connection (no idle or stalled client "
                        "may hold it up)", SERVE_S, line=11)
        return int(ev.data["conn"])

    def _open_conns(self) -> list[_Conn]:
        return [c for c in self.conns if c.state in ("idle", "header", "kept")]

    def _stop_begins(self) -> None:
        """A stop of the current listener begins: every connection it serves must read EOF at once."""
        if self.phase is Phase.SERVING:
            self.eof_due = self._open_conns()
            if self.eof_due:
                self.trace[-1].args["closes"] = [c.name for c in self.eof_due]

    def can_serve(self) -> bool:
        return self.phase is Phase.SERVING and self.parked is None and self.path_state == "ours"

    def _finishable(self) -> list[_Conn]:
        ready = self.phase is Phase.SERVING and self.parked is None
        return [c for c in self.conns if c.state == "cancelled" or (c.state == "header" and ready)]

    # ------------------------------------------------------------------ rules
    @precondition(lambda self: self.can_serve())
    @rule()
    def connect(self) -> None:
        """An idle connection: accepted, never speaks."""
        name = self._name("c")
        self._record("connect", name=name)
        with self._explaining(f"connect {name}"):
            mark = self.rig.mark()
            sock = self.rig.connect(self.w)
            self.conns.append(_Conn(name, sock, "idle", self._accepted(mark)))

    @precondition(lambda self: self.can_serve())
    @rule(page=st.integers(0, 7))
    def send_header(self, page: int) -> None:
        """A fresh connection sends a map's 4-byte header and withholds the body."""
        name = self._name("h")
        data = wire.encode_request(_map(page, name))
        self._record("send_header", name=name, offsets=[page * 2 * MiB])
        with self._explaining(f"send_header {name}"):
            mark = self.rig.mark()
            sock = self.rig.connect(self.w)
            sock.sendall(data[:wire.HEADER.size])
            cid = self._accepted(mark)
            self._wait(lambda e: e.kind == "frame_started" and e.data.get("conn") == cid, mark,
                       f"start reading the frame of {name}", SERVE_S, line=11)
            self.conns.append(_Conn(name, sock, "header", cid, data[wire.HEADER.size:]))

    @precondition(lambda self: bool(self._finishable()))
    @rule(data=st.data())
    def send_body(self, data: st.DataObject) -> None:
        """The withheld body arrives: served while serving; refused at the socket once stop cancelled the read."""
        self.finish(data.draw(st.sampled_from([c.name for c in self._finishable()]), label="conn"))

    def finish(self, name: str) -> None:
        """send_body on the connection named ``name`` (what the rule does once it has drawn one)."""
        conn = next(c for c in self._finishable() if c.name == name)
        self._record("send_body", name=conn.name)
        with self._explaining(f"send_body {conn.name}"):
            if conn.state == "header":
                mark = self.rig.mark()
                conn.sock.settimeout(scaled())
                conn.sock.sendall(conn.rest)
                reply = wire.decode_reply(wire.recv_frame(conn.sock))
                if reply.status != "success":
                    raise Violation(11, f"{conn.name}, completed while serving, was answered {reply.status} "
                                        f"({reply.error_type}: {reply.message})")
                self._wait(lambda e: e.kind == "dispatch_finished" and e.data.get("conn") == conn.cid, mark,
                           f"finish dispatching {conn.name}")
                conn.state = "kept"
                return
            try:
                conn.sock.sendall(conn.rest)
                sent = True
            except OSError:
                sent = False
            conn.state = "closed"
            conn.sock.close()
            if sent:
                raise Violation(2, f"the connection of {conn.name}, whose read stop cancelled, still took the rest "
                                   f"of its frame")

    @precondition(lambda self: self.can_serve())
    @rule(page=st.integers(0, 7), queued=st.booleans())
    def park(self, page: int, queued: bool) -> None:
        """A map parks inside the backend (failpoint); ``queued``: a second map is pipelined behind it."""
        fault, call = self._name("f"), self._name("p")
        self._record("park", fault=fault, call=call, offsets=[page * 2 * MiB],
                     queued=[(page + 8) * 2 * MiB] if queued else [])
        with self._explaining(f"park {call}"):
            fp = failpoints.arm(f"backend.{MAP}", "pause", count=1)
            mark = self.rig.mark()
            sock = self.rig.connect(self.w)
            payload = wire.encode_request(_map(page, call))
            if queued:
                payload += wire.encode_request(_map(page + 8, call + "_queued"))
            sock.sendall(payload)  # one write: both frames arrive in one read
            cid = self._accepted(mark)
            if not fp.wait_reached(timeout=scaled(SERVE_S)):
                raise Violation(11, f"{call} never reached the backend within {scaled(SERVE_S):.1f}s")
            n = 2 if queued else 1
            pending = self.rig.call_async(lambda: _read_replies(sock, n), name=f"explore-client-{call}")
            self.parked = _Parked(fault, call, fp, sock, cid, pending, queued)

    @precondition(lambda self: self.parked is not None)
    @rule()
    def release(self) -> None:
        """The parked handler goes on: its reply (and the queued one's) arrives; a draining stop finishes."""
        parked = self.parked
        assert parked is not None
        self._record("release", fault=parked.fault, call=parked.call, stops=[n for n, _ in self.draining])
        with self._explaining(f"release {parked.fault}"):
            self.parked = None
            mark = self.rig.mark()
            parked.fp.release()
            replies: list[wire.Reply] = parked.pending.result()
            parked.sock.close()
            if not replies or replies[0].status != "success":
                got = f"{replies[0].status} ({replies[0].error_type}: {replies[0].message})" if replies else "nothing"
                raise Violation(3, f"the drained handler {parked.call} got {got} after release, not success")
            if parked.queued:
                want = "success" if self.phase is Phase.SERVING else "shutting_down"
                got = "nothing" if len(replies) < 2 else replies[1].error_type or replies[1].status
                if got != want:
                    raise Violation(1, f"the request queued behind {parked.call} got {got}, expected {want}"
                                       + ("" if want == "success" else ": stop had begun before it was dispatched"))
            if self.phase is Phase.SERVING:
                self._wait(lambda e: e.kind == "connection_closed" and e.data.get("conn") == parked.cid, mark,
                           f"see {parked.call}'s client close")
            else:
                self._wait(lambda e: e.kind == "thread_exited", mark, "exit its serving thread after the drain")
            for name, stop in self.draining:
                if stop.result() is not True:
                    raise Violation(3, f"stop {name}, waiting for the drain, did not return True once the handler "
                                       f"finished")
                self.phase = Phase.STOPPED
            self.draining = []

    @precondition(lambda self: self.phase is not Phase.STOPPED)
    @rule()
    def stop(self) -> None:
        """Stop through the registry: False while a handler is parked (short timeout), else True."""
        parked = self.parked is not None
        name = self._name("s")
        timeout = SHORT_STOP_S if parked else None
        self._record("stop", name=name, timeout=timeout, returns=not parked)
        with self._explaining(f"stop {name}"):
            self._stop_begins()
            ok = self.rig.registry.stop_all(timeout)
            if parked and ok:
                raise Violation(5, f"stop {name} returned True while a handler was parked inside the backend "
                                   f"(it must wait for the drain and return False when it times out)")
            if not parked and not ok:
                raise Violation(7 if self.path_state != "ours" else 4,
                                f"stop {name} returned False with no handler in the backend"
                                + (f" (socket path {self.path_state} while live)" if self.path_state != "ours"
                                   else ""))
            self.phase = Phase.STOPPED if ok else Phase.STOPPING

    @precondition(lambda self: self.parked is None and not self.draining and self.phase is not Phase.STOPPED)
    @rule()
    def stop_cleanup_fails(self) -> None:
        """Stop while the socket unlink fails: False, nothing dropped; a later stop retries."""
        fault, name = self._name("f"), self._name("s")
        self._record("stop_cleanup_fails", fault=fault, name=name, returns=False)
        with self._explaining(f"stop_cleanup_fails {name}"):
            fp = failpoints.arm("cleanup.unlink", "raise", count=1, message="injected cleanup failure")
            self._stop_begins()
            try:
                ok = self.rig.registry.stop_all()
            finally:
                failpoints.disarm("cleanup.unlink")
            if ok:
                raise Violation(6, f"stop {name} returned True although its cleanup failed")
            self.phase = Phase.STOPPING
            # teardown unlinks first and closes the server only after: a failed unlink leaves it open
            self.server_closed = self.server_closed and fp.hits > 0

    @precondition(lambda self: self.parked is not None and not self.draining)
    @rule()
    def concurrent_stop(self) -> None:
        """While one stop waits for the parked handler, a second stop (short timeout) must return False."""
        first, second = self._name("s"), self._name("s")
        self._record("concurrent_stop", first=first, second=second, timeout_first=scaled(), timeout=SHORT_STOP_S)
        with self._explaining(f"concurrent_stop {first}/{second}"):
            self._stop_begins()
            mark = self.rig.mark()
            pending = self.rig.call_async(lambda: self.rig.registry.stop_all(scaled()), name=f"explore-{first}")
            self.draining.append((first, pending))
            self.phase = Phase.STOPPING
            ev = self._wait(lambda e: e.kind in ("drain_started", "stop_returned"), mark,
                            f"start draining for {first}")
            if ev.kind == "stop_returned":  # it did not wait for the parked handler at all
                raise Violation(5, f"stop {first} returned {pending.result()} without waiting for the handler "
                                   f"parked inside the backend")
            if self.rig.registry.stop_all(SHORT_STOP_S):
                raise Violation(6, f"the concurrent stop {second} returned True while {first} was still draining")

    @precondition(lambda self: self.parked is not None and self.phase is Phase.SERVING)
    @rule()
    def shutdown(self) -> None:
        """Integration shutdown while a handler is parked: False, and the allocator is kept for the retry."""
        name = self._name("x")
        self._record("shutdown", name=name, returns=False)
        with self._explaining(f"shutdown {name}"):
            self._stop_begins()
            ok = self.w.shutdown()
            self.phase = Phase.STOPPING
            if ok or self.w.allocator.torn_down:
                raise Violation(10, f"shutdown {name} returned {ok} and "
                                    f"{'tore' if self.w.allocator.torn_down else 'did not tear'} the allocator down "
                                    f"while a handler was parked inside the backend")

    @precondition(lambda self: not self.draining)
    @rule()
    def restart(self) -> None:
        """start() again on the key: replaces a listener that stops; refused (ListenerBusy) while one drains."""
        busy = self.parked is not None
        name = self._name("t")
        self._record("restart", name=name, returns=not busy)
        with self._explaining(f"restart {name}"):
            self._stop_begins()
            try:
                new = self.w.start()
            except ListenerBusy as exc:
                self.phase = Phase.STOPPING
                if not busy:
                    raise Violation(9, f"restart {name} was refused with no handler in the backend: {exc}") from None
                return
            except Exception as exc:
                raise Violation(9, f"restart {name} raised {type(exc).__name__} ({exc}); expected "
                                   + ("ListenerBusy, the draining listener left registered" if busy
                                      else "a new listener")) from exc
            if busy:
                raise Violation(9, f"restart {name} replaced a listener whose handler was still parked")
            old = self.listener
            if not old.torn_down:
                raise Violation(9, f"restart {name} started a new listener without stopping the old one")
            self.listener = new
            self.listeners.append(new)
            self.phase = Phase.SERVING
            self.path_state = "ours"
            self.replacement_ino = None
            self.server_closed = False

    @precondition(lambda self: self.path_state == "ours" and self.phase is not Phase.STOPPED)
    @rule()
    def remove_path(self) -> None:
        """Delete the socket file (and its owner record) while the listener is live."""
        self._record("remove_path")
        with self._explaining("remove_path"):
            env.remove_socket(self.w.path)
            self.path_state = "removed"

    @precondition(lambda self: self.path_state == "ours" and self.phase is not Phase.STOPPED
                  and (not self.server_closed or self.replace_after_failed_cleanup))
    @rule()
    def replace_path(self) -> None:
        """Put another socket (another inode) at the path while the listener is live."""
        self._record("replace_path")
        with self._explaining("replace_path"):
            self.replacements.append(env.replace_socket(self.w.path))
            self.replacement_ino = os.stat(self.w.path).st_ino
            self.path_state = "replaced"

    # ------------------------------------------------------------- invariants
    @invariant()
    def stop_contract(self) -> None:
        """The stop contract, after every step."""
        with self._explaining(f"after step {len(self.trace)} ({self.trace[-1].kind if self.trace else 'start'})"):
            self._reads_cancelled()
            self._history()
            if self.phase is Phase.SERVING:
                self._serving()
            elif self.phase is Phase.STOPPING:
                self._retained()
            else:
                self._torn_down()

    def _reads_cancelled(self) -> None:
        """Line 2: every connection open when stop began (idle, stalled, kept alive) reads EOF at once."""
        due, self.eof_due = self.eof_due, []
        for conn in due:
            if not _is_eof(conn.sock, scaled(AT_ONCE_S)):
                raise Violation(2, f"connection {conn.name} ({conn.state}), open when stop began, was not closed "
                                   f"within {scaled(AT_ONCE_S):.1f}s"
                                   + (" while a handler was parked" if self.parked is not None else ""))
            if conn.state == "header":
                conn.state = "cancelled"  # keep the socket: a later send_body tries to finish the frame
            else:
                conn.state = "closed"
                conn.sock.close()

    def _history(self) -> None:
        """Lines 1, 3 and 10 as the checkers judge the recorded history."""
        run = RunRecord(tuple(self.rig.rec.events()))
        for name, line in (("no_late_dispatch", 1), ("handler_drained", 3), ("teardown_deferred", 10)):
            verdict = judge(name, run)
            if verdict.status == "violated":
                raise Violation(line, f"{name}: {verdict.message}")
            if verdict.status == "unknown" and "crashed" in verdict.message:
                raise ContractViolation(f"checker {name}: {verdict.message}")

    def _serving(self) -> None:
        thread = self.listener.thread
        if thread is None or not thread.is_alive():
            raise Violation(11, "the serving thread is gone although no stop has begun")
        if self.rig.registry.get(self.rig.registry.key_of(self.listener)) is not self.listener:
            raise Violation(9, "the serving listener is not registered")

    def _path_kept(self) -> str | None:
        """What is wrong at the socket path of a listener that must still own (or not own) it, if anything."""
        path = self.w.path
        if self.path_state == "ours":
            try:
                st_ = os.stat(path)
            except FileNotFoundError:
                return "the socket file is gone"
            if (st_.st_dev, st_.st_ino) != self.listener._ident:
                return "the socket file is not the one the listener bound"
        elif self.path_state == "replaced":
            try:
                if os.stat(path).st_ino != self.replacement_ino:
                    return "the socket that replaced ours is not at the path any more"
            except FileNotFoundError:
                return "the socket that replaced ours was unlinked"
        return None

    def _retained(self) -> None:
        """Line 5 (and 6): after a False stop nothing is torn down and the listener stays registered."""
        if self.listener.torn_down:
            raise Violation(5, "a stop that returned False tore the listener down")
        if self.rig.registry.get(self.rig.registry.key_of(self.listener)) is not self.listener:
            raise Violation(6, "a stop that returned False dropped the registration: nothing is left to retry")
        wrong = self._path_kept()
        if wrong:
            raise Violation(5, f"after a stop that returned False, {wrong}")

    def _torn_down(self) -> None:
        """Line 4: after a True stop the thread has exited, the path and directory are gone, nothing registered."""
        thread = self.listener.thread
        if thread is not None:
            thread.join(scaled(AT_ONCE_S))
            if thread.is_alive():
                raise Violation(4, "stop returned True but the serving thread is still alive")
        if self.rig.registry.get(self.rig.registry.key_of(self.listener)) is self.listener:
            raise Violation(4, "stop returned True but the listener is still registered")
        path = Path(self.w.path)
        if self.path_state == "replaced":
            wrong = self._path_kept()
            if wrong:
                raise Violation(4, f"after stop returned True, {wrong}: teardown removed what was not its own")
            return
        left = [str(p) for p in (path, owner_path(path), path.parent) if os.path.lexists(p)]
        if left:
            raise Violation(4, f"stop returned True but left {left}")

    # --------------------------------------------------------------- teardown
    def teardown(self) -> None:
        """Release every failpoint, force every listener down, close every socket, remove the root."""
        for c in self.conns:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self.parked is not None:
            try:
                self.parked.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        try:
            failpoints.reset()  # parked handlers go on, so a stop still draining finishes before the rig closes
            for _, stop in self.draining:
                try:
                    stop.result()
                except Exception:
                    pass
            self.rig.close()
            for listener in self.listeners:
                _force_down(listener)
        finally:
            for s in self.replacements:
                s.close()
            shutil.rmtree(self.root, ignore_errors=True)


def run_steps(machine: type[ListenerMachine], steps: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """Drive one example of ``machine`` through ``steps`` in order, without Hypothesis.

    Each step is a rule's name and its arguments (``("park", {"page": 0, "queued": True})``;
    ``("send_body", {"name": "h1"})`` finishes that connection).  The invariants
    are checked after every step, as Hypothesis does; the caller keeps each
    step's precondition.  Raises :class:`ExplorationFailure` where the contract breaks.
    """
    m = machine()
    try:
        m.stop_contract()
        for kind, args in steps:
            if kind == "send_body":
                m.finish(**args)
            else:
                getattr(m, kind)(**args)
            m.stop_contract()
    finally:
        m.teardown()


def machine_for(variant: Variant, root_factory: Callable[[], Path] = temp_root, *,
                replace_after_failed_cleanup: bool = False) -> type[ListenerMachine]:
    """A state machine class exploring ``variant``'s lifecycle; its ``TestCase`` is a test.

    ``root_factory`` makes each example's private socket root (a short directory,
    removed at the example's end).  ``replace_after_failed_cleanup`` adds an
    interleaving where the reference itself is known to break the contract
    (:data:`REFERENCE_GAPS`): the socket file replaced after a failed cleanup
    closed the server socket (the retry must not unlink the replacement).
    """
    attrs: dict[str, Any] = {"variant": variant, "root_factory": staticmethod(root_factory),
                             "replace_after_failed_cleanup": replace_after_failed_cleanup, "__module__": __name__,
                             "__doc__": f"Lifecycle explorer over the {variant.name!r} variant."}
    return type(f"Explore_{variant.name}", (ListenerMachine,), attrs)
