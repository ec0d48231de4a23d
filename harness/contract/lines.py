"""One check per line of the stop contract (docs/stop-contract.md), each runnable against any variant.

A check drives a :class:`Rig`, whose recorder keeps the history that
:func:`harness.contract.run_check` judges with the checkers the check names (what
happened in which order: dispatches after a stop, a stop returning over a running
handler).  What no checker judges yet, the check asserts itself (its harness-side
part): it raises :class:`ContractViolation` saying what broke, or returns.
tests/test_contract.py runs each on ``reference`` (must pass) and on each planted
bug it names (must fail, by the oracles it names).  Synchronisation is by
failpoints and history events only; the few time bounds are safety nets or the
generous "at once" bounds the contract asks for.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from harness import failpoints
from harness.contract.rig import MiB, Pending, Rig, violated
from harness.contract.target_rig import open_rig
from harness.errors import ListenerBusy
from harness.faults.client import closed
from harness.reference import wire
from harness.reference.variants import Variant
from harness.reference.worker import ReferenceWorker
from harness.timeouts import AT_ONCE_S, scaled

SHORT_DRAIN_S = 0.1  # drain_timeout where a check needs the drain to time out (a parked handler holds it)

MAP: wire.Command = "map_to_kv_tensors"


def _map(*pages: int, id: str | None = None) -> wire.Request:
    return wire.Request(cmd=MAP, offsets=[p * 2 * MiB for p in pages], id=id)


def _park_map(rig: Rig, w: ReferenceWorker, page: int = 0) -> tuple[failpoints.Failpoint, Pending]:
    fp = failpoints.arm(f"backend.{MAP}", "pause", count=1)
    pending = rig.request_async(w, _map(page, id="parked"))
    if not fp.wait_reached(timeout=scaled()):
        raise violated("the parked request never reached the backend")
    return fp, pending


# --------------------------------------------------------------------------- 1
def no_late_dispatch(variant: Variant, root: Path) -> None:
    """1. Nothing is dispatched once stop began: a request queued behind the backend gets shutting_down.

    Checker no_late_dispatch judges the dispatches, requests_served the two replies (each recorded as a
    harness step: the first must reach the client, though stop began while its handler ran, and so must the
    queued request's answer; a bug that cuts a reply may cut either, as load has it); asserted here: the
    first reply's success and the queued request's shutting_down, or, from a listener that reads one frame
    at a time and so never completed the queued one (one frame_completed), its connection closed unread."""
    with open_rig(variant, root) as rig:
        w = rig.worker()
        fp = failpoints.arm(f"backend.{MAP}", "pause", count=1)
        s = rig.connect(w)
        s.sendall(wire.encode_request(_map(0, id="first")) + wire.encode_request(_map(1, id="queued")))
        if not fp.wait_reached(timeout=scaled()):
            raise violated("the first request never reached the backend")
        stop = rig.call_async(lambda: rig.listener(w).stop(), "stop")
        rig.wait("stop_started")
        fp.release()
        if stop.result() is not True:
            raise violated("stop did not return True after the handler finished")
        # a listener that reads one frame at a time never read the queued one: it is not dispatched, and its
        # connection closes with it unread (line 1 asks shutting_down of a frame completed, queued for the backend)
        read = len(rig.events("frame_completed"))
        names = ("first", "queued") if read >= 2 else ("first",)
        replies = [rig.step("send", name, lambda: wire.decode_reply(wire.recv_frame(s)), category="request")
                   for name in names]
        if replies[0].status != "success" or (read >= 2 and replies[1].error_type != "shutting_down"):
            raise violated(f"expected success then shutting_down, got {[(r.status, r.error_type) for r in replies]}")
        if read < 2 and not closed(s, scaled(AT_ONCE_S)):
            raise violated("the queued request was never read, yet its connection stayed open after the stop")


# --------------------------------------------------------------------------- 2
def reads_cancelled(variant: Variant, root: Path) -> None:
    """2. A read in progress is cancelled when stop begins, even while a handler drains.

    Checkers reads_cancelled and no_late_dispatch judge the history (the withheld body, sent too late,
    must not be dispatched); asserted here: the client sees its connection closed at once."""
    with open_rig(variant, root) as rig:
        w = rig.worker()
        stalled = rig.connect(w)
        mark = rig.mark()
        body = wire.encode_request(_map(3, id="stalled"))
        stalled.sendall(body[:4])  # the header: the body is withheld
        rig.wait("frame_started", after=mark)
        fp, parked = _park_map(rig, w)
        stop = rig.call_async(lambda: rig.listener(w).stop(), "stop")
        rig.wait("stop_started")
        cancelled = closed(stalled, scaled(AT_ONCE_S))
        try:
            stalled.sendall(body[4:])  # too late: must never be dispatched
        except OSError:
            pass
        fp.release()
        stop.result()
        parked.result()
        if not cancelled:
            raise violated("a read stalled after the header was not cancelled when stop began")


# --------------------------------------------------------------------------- 3
def handler_drained(variant: Variant, root: Path) -> None:
    """3. A handler inside the backend is waited for, and its reply still reaches its client.

    Checker handler_drained judges that stop returned only after the handler finished; asserted here:
    stop did not return before the drain began, and the reply arrived."""
    with open_rig(variant, root) as rig:
        w = rig.worker()
        fp, parked = _park_map(rig, w)
        stop = rig.call_async(lambda: rig.listener(w).stop(), "stop")
        first = rig.wait(lambda e: e.kind in ("drain_started", "stop_returned"))
        if first.kind == "stop_returned":
            fp.release()
            raise violated("stop returned while a handler was still inside the backend")
        fp.release()
        ok = stop.result()
        reply = parked.result()
        if ok is not True or reply.status != "success":
            raise violated(f"after the drain: stop={ok}, parked reply={reply.status}")


# --------------------------------------------------------------------------- 4
def teardown_keeps_other_ranks(variant: Variant, root: Path) -> None:
    """4. Teardown removes only what is ours: a directory stays while another rank's socket is in it.

    The stops and rank 1's request after rank 0 stopped are recorded as harness steps: checkers
    stop_result (every stop True) and requests_served judge them; asserted here too: which sockets and
    directories are left at each point."""
    with open_rig(variant, root) as rig:
        w0, w1, p1 = rig.worker(0), rig.worker(1), rig.worker(0, pp=1)
        if rig.step("stop", "rank0", rig.listener(w0).stop) is not True:
            raise violated("stop of rank 0 did not return True")
        exists = os.path.exists(w0.path), os.path.exists(w1.path)
        try:
            reply = rig.step("send", "rank1", lambda: rig.request(w1, wire.Request(cmd="kv_tensors_created")),
                             category="request")
        except OSError:
            reply = None
        if exists != (False, True):
            raise violated(f"after stopping rank 0: w0 exists={exists[0]}, w1 exists={exists[1]}")
        if reply is None or reply.status != "success":
            raise violated("rank 1 no longer serves after rank 0 stopped")
        rig.step("stop", "rank1", rig.listener(w1).stop)
        ppdir = Path(p1.path).parent
        if not ppdir.exists():
            raise violated("the pp1 directory was removed while pp1/rank0 still serves")
        rig.step("stop", "pp1", rig.listener(p1).stop)
        left = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
        if left:
            raise violated(f"left behind after every rank stopped: {left}")


def unlink_only_own_socket(variant: Variant, root: Path) -> None:
    """4. The socket file is unlinked only if it is still the one this listener bound.

    The replacement is recorded as the scenario step replace records it (path_replaced, with its inode), the
    stop as a harness step, and the paths are snapshotted after the stop: checkers unlinks_only_own_socket
    (black-box: the replacement is still there) and stop_result (True) judge them; asserted here too: the
    same, by looking at the path.  Nothing is parked, so the reference's stop returns at once; the drain is the
    "at once" bound, not 5 s that a stop that cannot wake its thread (wake_by_connect) waits out twice."""
    with open_rig(variant, root, drain_timeout=scaled(AT_ONCE_S)) as rig:
        w = rig.worker()
        os.unlink(w.path)
        other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            other.bind(w.path)  # someone else's socket now lives at our path
            rig.rec.emit("path_replaced", step="replace", path=w.path, ino=os.stat(w.path).st_ino)
            ok = rig.step("stop", "s1", rig.listener(w).stop)
            rig.snapshot("after")
            survived = os.path.exists(w.path)
        finally:
            other.close()
            if os.path.exists(w.path):
                os.unlink(w.path)
            rig.tidy(w)
        if ok is not True:
            raise violated("stop did not return True with the path replaced")
        if not survived:
            raise violated("stop unlinked a socket that replaced ours at the path")


# --------------------------------------------------------------------------- 5
def retained_for_retry(variant: Variant, root: Path) -> None:
    """5. Not drained in time: False, nothing torn down, still registered; a retry finishes.

    Checkers retained_for_retry, handler_drained and stop_result (s1 False, the retry s2 True) judge the
    history; asserted here: the socket and registration kept, the drained reply, the retry's cleanup."""
    with open_rig(variant, root, drain_timeout=SHORT_DRAIN_S) as rig:
        w = rig.worker()
        fp, parked = _park_map(rig, w)
        listener = rig.listener(w)
        rig.step("stop", "s1", rig.stop_all)  # stop_result judges what it returned: False
        kept = os.path.exists(w.path) and rig.registered(listener)
        fp.release()
        reply = parked.result()
        if not kept:
            raise violated("a stop that timed out tore down the socket or dropped the registration")
        if reply.status != "success":
            raise violated(f"the drained handler's reply was {reply.status}")
        rig.step("stop", "s2", rig.stop_all)  # the retry: True
        if os.path.exists(w.path):
            raise violated("the retry after the drain did not clean up")


# --------------------------------------------------------------------------- 6
def concurrent_stop_waits(variant: Variant, root: Path) -> None:
    """6. A concurrent stop never reports True while another is still draining.

    Both stops are recorded as harness steps: checker handler_drained judges that neither reported True
    while the parked handler was inside the backend; asserted here too: the second's value then."""
    with open_rig(variant, root) as rig:
        w = rig.worker()
        fp, parked = _park_map(rig, w)
        first = rig.call_async(lambda: rig.step("stop", "s1", rig.stop_all), "stop-1")
        # its drain, or its return without one (a stop that tears down at once, teardown_while_alive): either
        # way the second stop comes while the handler is parked, instead of after a 10 s wait for a drain
        rig.wait(lambda e: e.kind == "drain_started" or (e.kind == "step_returned" and e.data.get("step") == "s1"))
        second = rig.call_async(lambda: rig.step("stop", "s2", rig.stop_all), "stop-2")
        rig.rec.wait_until(lambda evs: sum(e.kind == "drain_started" for e in evs) >= 2
                           or any(e.kind == "step_returned" and e.data.get("step") == "s2" for e in evs), scaled())
        early = second.done and second.result() is True and not parked.done
        fp.release()
        first.result()
        second.result()
        if early:
            raise violated("a concurrent stop reported True while the first was still draining")


def stop_from_handler_returns(variant: Variant, root: Path) -> None:
    """6. stop() called from a handler returns False at once instead of waiting for itself.

    The stop inside the handler (run there by a ``call`` failpoint at its backend site) is recorded as a
    harness step: checkers stop_result (False) and stop_latency (within 0.5 s) judge it; asserted here too:
    what it returned, how long it took, and that a stop after the handler finishes the stop."""
    seen: dict[str, object] = {}
    with open_rig(variant, root, drain_timeout=1.0) as rig:
        w = rig.worker()

        def stop_inside() -> None:
            t0 = _now()
            seen["ok"] = rig.step("stop", "inner", rig.listener(w).stop)
            seen["s"] = _now() - t0

        failpoints.arm("backend.kv_tensors_created", "call", count=1, fn=stop_inside)
        rig.request(w, wire.Request(cmd="kv_tensors_created"))
        final = rig.listener(w).stop()
    if seen.get("ok") is not False:
        raise violated(f"stop() from a handler returned {seen.get('ok')!r}, not False")
    took = seen.get("s")
    if not isinstance(took, float) or took >= 0.5:
        raise violated(f"stop() from a handler took {took}s: it waited for its own thread")
    if final is not True:
        raise violated("stop() after the handler returned did not finish the stop")


def cleanup_error_keeps_registration(variant: Variant, root: Path) -> None:
    """6. A cleanup error makes stop return False, never raise, and keeps the registration for a retry.

    The two stops are recorded as harness steps and the paths snapshotted before and after: checkers
    registration_kept (the registry's events: the listener leaves it only once stopped), stop_result (s1
    False, the retry s2 True) and no_leftover_paths judge them; asserted here too: the registry's size, what
    each stop returned, the socket after the retry."""
    with open_rig(variant, root) as rig:
        rig.snapshot("before")
        w = rig.worker()
        failpoints.arm("cleanup.unlink", "raise", count=1, message="unlink failed")
        ok: object
        try:
            ok = rig.step("stop", "s1", rig.stop_all)
        except Exception as exc:
            ok = exc
        kept = len(rig.registry) == 1
        retry = rig.step("stop", "s2", rig.stop_all)
        rig.snapshot("after")
        if ok is not False:
            raise violated(f"stop_all with a failing cleanup returned {ok!r}, not False")
        if not kept:
            raise violated("a cleanup error dropped the listener from the registry")
        if retry is not True or os.path.exists(w.path):
            raise violated("the retry after a cleanup error did not finish the cleanup")


# --------------------------------------------------------------------------- 7
def stop_without_socket_path(variant: Variant, root: Path) -> None:
    """7. stop works when the socket file (or its directory) was removed while live.

    Checker stop_result judges that each stop returned True; nothing else is asserted here."""
    for remove_dir in (False, True):
        with open_rig(variant, root, drain_timeout=SHORT_DRAIN_S) as rig:
            w = rig.worker()
            os.unlink(w.path)
            Path(w.path).with_suffix(".owner").unlink(missing_ok=True)  # a variant may write none (no_owner_record)
            if remove_dir:
                os.rmdir(Path(w.path).parent)
            rig.step("stop", "dir" if remove_dir else "file", rig.listener(w).stop)  # stop_result: True


# --------------------------------------------------------------------------- 9
def restart_refused_while_draining(variant: Variant, root: Path) -> None:
    """9. start() on a registered key replaces the old listener only if it stops; else raises, old intact.

    The restarts are recorded as harness steps (start, with the refusal's error class): checkers
    restart_refused (r1 refused with ListenerBusy), stop_result (r2, after the drain, started) and
    registration_kept (the old listener stays registered) judge them; asserted here too: the refusal, the old
    listener registered with its socket, the restart after the drain."""
    with open_rig(variant, root, drain_timeout=SHORT_DRAIN_S) as rig:
        w = rig.worker()
        old = rig.listener(w)
        fp, parked = _park_map(rig, w)
        try:
            rig.step("restart", "r1", rig.worker, category="start")  # same ipc, rank and pp
            raised: Exception | None = None
        except Exception as exc:
            raised = exc
        intact = rig.registered(old) and os.path.exists(w.path)
        fp.release()
        parked.result()
        if not isinstance(raised, ListenerBusy):
            raise violated(f"restart over a draining listener raised {raised!r}, not ListenerBusy")
        if not intact:
            raise violated("a refused restart did not leave the old listener registered with its socket")
        if not rig.step("restart", "r2", lambda: rig.worker().listener is not None, category="start"):
            raise violated("restart after the drain did not start")


# -------------------------------------------------------------------------- 10
def teardown_deferred(variant: Variant, root: Path) -> None:
    """10. Integration shutdown defers allocator teardown while stop is False; no backend call after it.

    Checkers teardown_deferred, no_dispatch_after_teardown and stop_result (x1 False, x2 and x3 True) judge
    the history; asserted here too: what shutdown returned, the allocator kept while parked, one teardown
    over the retries."""
    with open_rig(variant, root, drain_timeout=SHORT_DRAIN_S) as rig:
        w = rig.worker()
        fp, parked = _park_map(rig, w)
        first = rig.step("shutdown", "x1", w.shutdown)  # stop_result judges the three: False, True, True
        torn_early = rig.torn_down(w)
        fp.release()
        reply = parked.result()
        second, third = rig.step("shutdown", "x2", w.shutdown), rig.step("shutdown", "x3", w.shutdown)
        if first is not False or torn_early:
            raise violated(f"shutdown returned {first} and tore the allocator down while a handler was parked")
        if reply.status != "success":
            raise violated(f"the drained handler ran against a torn-down allocator: {reply.message}")
        teardowns = rig.events("allocator_torn_down")
        if (second, third) != (True, True) or len(teardowns) != 1:
            raise violated(f"retries returned {second}, {third} with {len(teardowns)} teardowns (want 1)")


# -------------------------------------------------------------------------- 11
def served_while_stalled(variant: Variant, root: Path) -> None:
    """11. While one client sits idle and another stalls mid-frame, a third is still served.

    The idle and stalled clients and the request are recorded as the Player records them (peer_idle,
    peer_stalled, a request step), so checkers served_while_stalled and requests_served judge the
    history; asserted here too: the request was answered, with success."""
    with open_rig(variant, root) as rig:
        w = rig.worker()
        mark = rig.mark()
        rig.connect(w)  # idle
        rig.wait("accepted", after=mark)
        rig.rec.emit("peer_idle", step="idle", count=1)
        stalled = rig.connect(w)
        stalled.sendall(wire.encode_request(_map(1))[:6])
        rig.rec.emit("peer_stalled", step="stalled", fault="stall_mid_header")
        try:
            reply = rig.step("send", "probe", lambda: rig.request(w, wire.Request(cmd="kv_tensors_created"),
                                                                   timeout=scaled(AT_ONCE_S)), category="request")
        except (TimeoutError, OSError) as exc:
            raise violated(f"a request was not served while another client was idle: {exc}") from None
        if reply.status != "success":
            raise violated(f"request while others stall answered {reply.status}")


def _now() -> float:
    return time.monotonic()
