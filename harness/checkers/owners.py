"""Checkers of the owner records beside a listener's sockets, as ``lastcall ctl`` reads them.

They read the harness's own ``ctl`` steps (``step_returned`` with ``kind`` ctl, ``action`` list: the instances
with their artifacts, each with its ``state`` alive / dead / unknown and its owner's ``pid``) and the moments
the workers may stop serving (``stop_started``, a stop, signal or exit step starting).
"""

from __future__ import annotations

from harness.categories import category_of
from harness.checkers.base import RunRecord, Verdict, checker, ok, unknown, violated
from harness.checkers.params import Params

__all__ = ["ctl_sees_live_owners"]

ENDS = ("stop", "signal", "exit")  # step categories after which a worker may no longer be serving


@checker("ctl_sees_live_owners", "`lastcall ctl list` taken while the workers serve finds each of their sockets "
         "alive, its owner record naming a live pid: what ctl relies on to never delete a live instance",
         judges=("step_returned", "step_started", "stop_started"), observes_exit=False)
def ctl_sees_live_owners(run: RunRecord, p: Params) -> Verdict:
    ends = [e.t_ns for e in run.ordered if e.kind == "stop_started"
            or (e.kind == "step_started" and category_of(e.data) in ENDS)]
    until = min(ends, default=1 << 62)
    lists = [e for e in run.of("step_returned") if e.data.get("kind") == "ctl" and e.data.get("action") == "list"
             and e.data.get("ok") and e.t_ns < until]
    if not lists:
        return unknown("ctl_sees_live_owners", "no ctl list step returned while the workers were serving")
    sockets = [(e, a) for e in lists for inst in e.data.get("value") or () for a in inst.get("artifacts", ())
               if a.get("kind") == "socket"]
    if not sockets:
        return violated("ctl_sees_live_owners", f"{lists[0].data.get('step')}: ctl list found no socket of the "
                        "live workers", lists)
    bad = [(e, a) for e, a in sockets if a.get("state") != "alive" or a.get("pid") is None]
    if bad:
        e, a = bad[0]
        return violated("ctl_sees_live_owners", f"{e.data.get('step')}: ctl list calls the live socket {a.get('path')} "
                        f"{a.get('state')!r} (owner pid {a.get('pid')}): ctl would take it for a leftover",
                        [e for e, _ in bad])
    return ok("ctl_sees_live_owners", f"{len(sockets)} live socket(s) seen alive with their owners")
