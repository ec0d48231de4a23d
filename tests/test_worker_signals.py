"""A SIGTERM reaches a reference worker's handler whichever of its threads the kernel hands it to.

The kernel gives a process-directed signal to any thread that does not block it; Python runs the handler on the
main thread only, once that thread runs Python again.  The worker's main thread waits for its exit request in
``select`` on the signal wakeup fd (harness.launch.control.ExitRequest), so a signal taken by another thread
(here sent to one thread with tgkill, as the kernel may choose when the main thread is busy or just resumed)
still wakes it: the worker exits in order, its reason ``sigterm``.  Parked on a lock, it slept on.
"""

from __future__ import annotations

import ctypes
import os
import signal

import pytest

from harness.launch.cluster import ORDERLY_S, Cluster

_LIBC = ctypes.CDLL(None, use_errno=True)


def _threads(pid: int) -> dict[str, int]:
    """Each thread of ``pid`` by its kernel name (``comm``), but the main one."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        if int(tid) != pid:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                out[f.read().strip()] = int(tid)
    return out


def _tgkill(pid: int, tid: int, sig: int) -> None:
    if _LIBC.tgkill(pid, tid, sig) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill {pid} {tid}")


@pytest.mark.parametrize("thread", ["lc-control", "lc-listen-0.0"])
def test_a_sigterm_taken_by_another_thread_still_ends_the_worker_in_order(thread: str) -> None:
    c = Cluster(tp=1, drain_timeout=1.0)
    try:
        c.start()
        worker = c.worker(0)
        threads = _threads(worker.pid)
        assert thread in threads, sorted(threads)
        _tgkill(worker.pid, threads[thread], signal.SIGTERM)
        exited = worker.wait_exited(ORDERLY_S)
    finally:
        c.close()
    reasons = [e.data.get("reason") for e in c.rec.events() if e.kind == "exit_requested" and e.pid == worker.pid]
    assert exited and reasons == ["sigterm"] and worker.exit_code == 0, (exited, reasons, worker.exit_code)
