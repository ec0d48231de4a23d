"""Black-box checkers of a real engine's shutdown (the ``engine`` cast, harness.scenario.engine_steps).

Each judges from outside only: the harness's own step events (``engine_signal``, ``wait_gone``,
``engine_restart``, ``engine_request``: what it did and what the kernel, the pidfds, the file system and the
HTTP answers told it), no instrumentation inside the engine, so each declares no evidence (black-box) and
judges vLLM exactly as it judges the stand-in engine.  A run without the step a checker reads is
``unknown``, never ``ok``.

* ``engine_tree_exits``: every ``wait_gone`` saw the whole tree exit within ``within`` of the signal before
  it (none survives; a survivor reparented to the harness is named orphaned).
* ``engine_nothing_left``: nothing the tree created is left after it exited: no file or socket file under
  its TMPDIR, no /dev/shm segment its processes held when ready.
* ``engine_port_released``: every ``engine_restart`` on the run's port became ready (a restart binds).
* ``engine_exit_status``: the API server's exit status tells the truth: not 0 when its engine core or a
  worker was the one signalled (its engine died under it); 0 when a stop (SIGTERM, SIGINT) was asked of it.
* ``engine_requests_end``: every ``engine_request`` ended (complete, aborted, refused, cut or disconnected),
  none hung: a stream too, whether its client read it all, stopped reading or went away.
* ``engine_start_ends``: every launch (the first, each ``engine_restart`` and ``engine_start``) became ready or
  failed with a clear error within ``within`` (never waits forever); a start that was sent a stop signal
  while it was starting (``engine_start``) does not become ready.
* ``engine_refuses_late_requests``: every ``engine_request`` sent after the engine's own line said its
  shutdown began (``engine_shutdown_began``) was refused (an HTTP error, a closed connection, an abort with
  nothing generated), never generated.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from checker_oracle.registry import checker
from harness.checkers.base import RunRecord, Verdict, ok, unknown, violated
from harness.checkers.params import Params, Within
from harness.history import Event

__all__: list[str] = []

_STEPS = ("step_started", "step_returned")


def _returns(run: RunRecord, kind: str) -> list[Event]:
    return [e for e in run.of("step_returned") if e.data.get("kind") == kind]


def _signal_of(run: RunRecord, step: str) -> dict[str, Any] | None:
    for e in run.of("step_started"):
        if e.data.get("kind") == "engine_signal" and e.data.get("step") == step:
            return e.data
    return None


def _who(ps: list[dict[str, Any]]) -> str:
    return ", ".join(f"{p.get('name')} (pid {p.get('pid')})" for p in ps)


@checker("engine_tree_exits", "every process of the engine's tree exits within a bound of the signal; none "
         "survives, none is left orphaned", judges=_STEPS, evidence={})
def engine_tree_exits(run: RunRecord, p: Within) -> Verdict:
    name = "engine_tree_exits"
    waits = _returns(run, "wait_gone")
    if not waits:
        return unknown(name, "no wait_gone step returned: nothing saw the tree end")
    bound = p.within * run.scale
    bad: list[tuple[Event, str]] = []
    notes: list[str] = []
    order: list[str] = []
    for e in waits:
        v = e.data["value"]
        after = v.get("after") or "the start"
        if not v["gone"]:
            orphans = {o["pid"] for o in v.get("orphaned", ())}
            who = [dict(s, name=f"{s['name']}{' orphaned' if s['pid'] in orphans else ''}") for s in v["survivors"]]
            bad.append((e, f"{e.data['step']}: {len(who)} process(es) survived {after} by {v['seconds']:.1f}s: "
                           f"{_who(who)}"))
        elif v["seconds"] > bound:
            bad.append((e, f"{e.data['step']}: the tree took {v['seconds']:.2f}s to exit after {after} "
                           f"(bound {bound:g}s)"))
        else:
            notes.append(f"{e.data['step']}: gone {v['seconds']:.2f}s after {after}")
        if v["gone"] and v.get("orphaned"):  # exited in time, but after its parent: not a children-first stop
            order.append(f"{e.data['step']}: reparented to the harness on the way out (its parent exited first): "
                         + _who(v["orphaned"]))
    if bad:
        return violated(name, "; ".join(m for _, m in bad), [e for e, _ in bad], (*notes, *order))
    return ok(name, "; ".join(notes), tuple(order))


@checker("engine_nothing_left", "nothing the engine's tree created is left once it exited: no file or socket "
         "file under its TMPDIR, no /dev/shm segment it held", judges=_STEPS, evidence={})
def engine_nothing_left(run: RunRecord, p: Params) -> Verdict:
    name = "engine_nothing_left"
    waits = _returns(run, "wait_gone")
    if not waits:
        return unknown(name, "no wait_gone step returned: nothing looked for what the tree left")
    bad = [e for e in waits if e.data["value"]["left"]]
    if bad:
        msgs = []
        for e in bad:
            left = [x if isinstance(x, dict) else {"path": str(x), "kind": "unrecorded"}  # a path alone: 1st format
                    for x in e.data["value"]["left"]]
            kinds = {k: sum(1 for x in left if x["kind"] == k) for k in ("socket", "file", "shm", "unrecorded")}
            msgs.append(f"{e.data['step']}: {len(left)} left ("
                        + ", ".join(f"{n} of unrecorded kind" if k == "unrecorded" else f"{n} {k}{'s' if n > 1 else ''}"
                                    for k, n in kinds.items() if n) + "): "
                        + ", ".join(x["path"].rsplit("/", 1)[-1] for x in left[:8]) + (" ..." if len(left) > 8 else ""))
        return violated(name, "; ".join(msgs), bad)
    return ok(name, f"{len(waits)} end(s), nothing left")


@checker("engine_port_released", "every port of the engine is released: a restart on the same port binds and "
         "becomes ready", judges=_STEPS, evidence={})
def engine_port_released(run: RunRecord, p: Params) -> Verdict:
    name = "engine_port_released"
    restarts = _returns(run, "engine_restart")
    if not restarts:
        return unknown(name, "no engine_restart step returned: nothing tried the port again")
    bad = [e for e in restarts if not e.data.get("ok")]
    if bad:
        return violated(name, "; ".join(
            f"{e.data['step']}: the restart on port {e.data.get('port')} failed"
            f"{'' if (e.data.get('value') or {}).get('bindable', True) else ' (the port was still bound)'}: "
            f"{e.data.get('error', '')}" for e in bad), bad)
    return ok(name, f"{len(restarts)} restart(s) ready on the same port")


@checker("engine_exit_status", "the API server's exit status tells the truth: not 0 when its engine died under "
         "it, 0 when a stop was asked of it", judges=_STEPS, evidence={})
def engine_exit_status(run: RunRecord, p: Params) -> Verdict:
    name = "engine_exit_status"
    judged, bad, why_not = 0, [], []
    for e in _returns(run, "wait_gone"):
        v = e.data["value"]
        sig = _signal_of(run, v.get("after") or "")
        status = v.get("status")
        if sig is None:
            why_not.append(f"{e.data['step']}: no signal before it")
            continue
        if status is None:
            why_not.append(f"{e.data['step']}: the API server had not exited")
            continue
        if sig.get("ready") is False and sig["to"] == "api_server":
            why_not.append(f"{e.data['step']}: {sig['sig']} during the start (a start cut short: any status is "
                           "the truth)")
            continue
        if sig["to"] in ("engine_core", "worker"):
            judged += 1
            if status == 0:
                bad.append((e, f"{e.data['step']}: the API server exited 0 although its {sig['to']} got "
                               f"{sig['sig']} ({sig.get('process')} died under it)"))
        elif sig["to"] == "api_server" and sig["sig"] in ("SIGTERM", "SIGINT"):
            judged += 1
            if status != 0:
                bad.append((e, f"{e.data['step']}: a stop asked by {sig['sig']} exited with status {status}"))
        else:
            why_not.append(f"{e.data['step']}: {sig['sig']} of the {sig['to']} (any status is the truth)")
    if bad:
        return violated(name, "; ".join(m for _, m in bad), [e for e, _ in bad], tuple(why_not))
    if not judged:
        return unknown(name, "no exit to judge: " + ("; ".join(why_not) or "no wait_gone step returned"))
    return ok(name, f"{judged} exit status(es) true", tuple(why_not))


@checker("engine_requests_end", "every request to the engine ends (complete, aborted, refused or cut), none "
         "hangs", judges=_STEPS, evidence={})
def engine_requests_end(run: RunRecord, p: Params) -> Verdict:
    name = "engine_requests_end"
    started = [e for e in run.of("step_started") if e.data.get("kind") == "engine_request"]
    if not started:
        return unknown(name, "no engine_request step")
    ended = {e.data["step"]: e for e in _returns(run, "engine_request")}
    bad: list[tuple[Event, str]] = []
    for s in started:
        r = ended.get(s.data["step"])
        if r is None:
            bad.append((s, f"{s.data['step']}: never returned"))
        elif (r.data.get("value") or {}).get("outcome") == "hung":
            bad.append((r, f"{s.data['step']}: {r.data['value'].get('error', 'hung')}"))
    if bad:
        return violated(name, "; ".join(m for _, m in bad), [e for e, _ in bad])
    return ok(name, ", ".join(f"{k}: {e.data['value']['outcome']}" for k, e in ended.items()))


class StartBound(Params):
    """engine_start_ends: each start ends (ready, or a clear failure) within ``within`` seconds of its launch."""

    within: float = Field(120.0, gt=0, description="seconds from a launch to its ready line or its failure "
                          "(default: real vLLM's launch allowance)")


def _launches(run: RunRecord) -> list[tuple[Event, Event | None]]:
    """Each ``engine_launched`` with the ``engine_ready`` or ``engine_start_failed`` that ended it (None: none
    did), in launch order."""
    out: list[tuple[Event, Event | None]] = []
    ends = [e for e in run.events if e.kind in ("engine_ready", "engine_start_failed")]
    for launched in run.of("engine_launched"):
        pid = launched.data.get("pid")
        end = next((e for e in ends if e.t_ns >= launched.t_ns and (e.kind == "engine_start_failed"
                                                                    or e.data.get("pid") == pid)), None)
        if end is not None:
            ends.remove(end)
        out.append((launched, end))
    return out


@checker("engine_start_ends", "a start either becomes ready or fails with a clear error within a bound (never "
         "waits forever); a start that was sent a stop signal does not become ready", params=StartBound,
         judges=("engine_launched", "engine_ready", "engine_start_failed", *_STEPS), evidence={})
def engine_start_ends(run: RunRecord, p: StartBound) -> Verdict:
    name = "engine_start_ends"
    launches = _launches(run)
    if not launches:
        return unknown(name, "no engine_launched event: no start was seen")
    bound = p.within * run.scale
    bad: list[tuple[Event, str]] = []
    notes: list[str] = []
    for launched, end in launches:
        n = launched.data.get("launch")
        if end is None:
            bad.append((launched, f"launch {n}: neither ready nor failed (it never ended)"))
            continue
        seconds = (end.t_ns - launched.t_ns) / 1e9
        if end.kind == "engine_start_failed" and end.data.get("hung"):
            bad.append((end, f"launch {n}: neither ready nor gone at its bound: {end.data.get('error', '')}"))
        elif seconds > bound:
            what = "be ready" if end.kind == "engine_ready" else "fail"
            bad.append((end, f"launch {n}: took {seconds:.1f}s to {what} (bound {bound:g}s)"))
        elif end.kind == "engine_start_failed" and not str(end.data.get("error", "")).strip():
            bad.append((end, f"launch {n}: failed without saying why"))
        else:
            notes.append(f"launch {n}: {'ready' if end.kind == 'engine_ready' else 'failed: ' + str(end.data['error'])}"
                         f" in {seconds:.2f}s")
    for e in _returns(run, "engine_start"):
        v = e.data.get("value") or {}
        if v.get("ready") and v.get("stopped"):
            bad.append((e, f"{e.data['step']}: a stop signal sent while it was starting was lost: it became ready "
                           f"{v.get('ready_s', '?')}s after its launch and kept running"))
        elif v.get("stopped"):
            notes.append(f"{e.data['step']}: stopped during its start, never ready")
    if bad:
        return violated(name, "; ".join(m for _, m in bad), [e for e, _ in bad], tuple(notes))
    return ok(name, "; ".join(notes))


def _late(run: RunRecord) -> list[Event]:
    """The engine_request steps started after the engine said its shutdown began, before the next start."""
    out, late = [], False
    for e in run.events:
        if e.kind == "engine_shutdown_began":
            late = True
        elif e.kind == "engine_launched":
            late = False
        elif late and e.kind == "step_started" and e.data.get("kind") == "engine_request":
            out.append(e)
    return out


@checker("engine_refuses_late_requests", "a request sent after the engine's shutdown began is refused, never "
         "generated (the engine-level late dispatch)", judges=("engine_shutdown_began", *_STEPS), evidence={})
def engine_refuses_late_requests(run: RunRecord, p: Params) -> Verdict:
    name = "engine_refuses_late_requests"
    late = _late(run)
    if not late:
        return unknown(name, "no request was sent after the engine said its shutdown began")
    ended = {e.data["step"]: e for e in _returns(run, "engine_request")}
    bad: list[tuple[Event, str]] = []
    notes: list[str] = []
    unsent = 0  # late requests the step gave up on before sending (no shutdown line seen in time)
    for s in late:
        r = ended.get(s.data["step"])
        v = (r.data.get("value") or {}) if r is not None else {}
        outcome = v.get("outcome", "never returned")
        unsent += outcome == "not_sent"
        if outcome == "complete" or (v.get("tokens") or 0) > 0:
            bad.append((r or s, f"{s.data['step']}: generated after shutdown began ({outcome}, "
                                f"{v.get('tokens', '?')} token(s))"))
        else:
            notes.append(f"{s.data['step']}: {outcome}" + (f" ({v['status']})" if v.get("status") else ""))
    if bad:
        return violated(name, "; ".join(m for _, m in bad), [e for e, _ in bad], tuple(notes))
    if unsent == len(late):  # nothing was refused: no evidence either way
        return unknown(name, "no late request was sent: " + "; ".join(notes))
    return ok(name, "; ".join(notes))
