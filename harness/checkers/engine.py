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
* ``engine_requests_end``: every ``engine_request`` ended (complete, aborted, refused or cut), none hung.
"""

from __future__ import annotations

from typing import Any

from harness.checkers.base import RunRecord, Verdict, checker, ok, unknown, violated
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
