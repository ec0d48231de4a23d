"""Contract line 8, checked in a real child interpreter: the exit hook at interpreter exit.

The child (``_child(MODE, VARIANT, ROOT, HISTORY)``, forked from the harness's fork server, whose
modules a worker finds loaded too, and ending through normal interpreter finalization) starts
listeners in the variant's process-wide registry and returns from main; the
parent times how long interpreter exit then takes and looks at what is left.

* ``stuck``: two listeners each with a handler parked forever, drain_timeout 1 s (scaled),
  exit budget 0.2 s: exit must take about the budget, not 2 x drain_timeout.
* ``retry``: a stop that timed out (False, kept registered), then the handler
  finishes; the exit hook must retry and remove the socket on a clean exit.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from harness.timeouts import scaled

EXIT_BUDGET_S = 0.2  # the child's exit budget (the stuck listeners hold it whole: any length is waited out)
# drain_timeout of each stuck listener in the child, before scaling.  Scaled, as the bounds are: an exit hook
# that drains each listener whole takes STUCK_LISTENERS x this, over both bounds (exit_hook_within's 1.2 s and
# the own assertion's budget + 1 s, each scaled) at any LASTCALL_TIMEOUT_SCALE; unscaled, a scale of 3.8 let it
# pass.
STUCK_DRAIN_S = 1.0
STUCK_LISTENERS = 2
# What the fork server's child runs (harness.launch.forkserver.call), and what it puts first on sys.path
CHILD_CALL = "harness.contract.exit_probe:_child"
CHILD_PATH: list[str] = []


def _child(mode: str, variant_name: str, root: str, history: str) -> None:
    import atexit

    from harness.history import Recorder

    rec = Recorder(role="worker")

    def done() -> None:
        print(f"hooks-done {time.monotonic_ns()}", flush=True)
        rec.write(history)  # the whole history, the exit hook's events included, for the checkers

    # atexit runs hooks last-registered-first: this one, registered before any listener's,
    # runs after every other hook and marks the moment exit hooks are done.
    atexit.register(done)
    from harness import failpoints
    from harness.reference import wire
    from harness.reference.listener import ListenerConfig
    from harness.reference.variants import get_variant
    from harness.reference.worker import WorkerSpec

    variant = get_variant(variant_name)
    registry = variant.registry(exit_budget=EXIT_BUDGET_S, exit_hook=True, recorder=rec)
    drain = scaled(STUCK_DRAIN_S) if mode == "stuck" else 0.1
    count = STUCK_LISTENERS if mode == "stuck" else 1
    fp = failpoints.arm("backend.map_to_kv_tensors", "pause")
    workers = []
    for rank in range(count):
        spec = WorkerSpec("x", rank=rank, root=root, config=ListenerConfig(drain_timeout=drain), capacity=1 << 24)
        w = variant.worker(spec, registry=registry, listener_cls=variant.listener, recorder=rec)
        w.start()
        workers.append(w)

    replies: list[object] = []

    def client(path: str) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        s.sendall(wire.encode_request(wire.Request(cmd="map_to_kv_tensors", offsets=[0])))
        try:
            replies.append(wire.recv_frame(s))
        except OSError:
            pass

    threads = [threading.Thread(target=client, args=(w.path,), daemon=True) for w in workers]
    for t in threads:
        t.start()
    fp.wait_reached(count, timeout=scaled())
    if mode == "retry":
        stopped = registry.stop_all()  # times out: the handler is parked
        fp.release()
        threads[0].join(scaled())
        print(f"stop-before-exit {stopped} registered {len(registry)}", flush=True)
    rec.emit("exit_requested", reason="main returned")
    print(f"exiting {time.monotonic_ns()}", flush=True)


def _spawn(mode: str, variant: str, root: Path, history: str) -> tuple[int, int, int, str, str]:
    """Fork the child from this process's fork server (its modules loaded, as a worker's are) and wait for it
    to be reaped: (its pid, its exit status as Popen gives it, the reap's monotonic ns, its stdout, its
    stderr)."""
    import signal

    from harness.launch.spawn import ForkServer
    from harness.targets import uses_torch

    outs = [tempfile.mkstemp(prefix="lastcall-exit-probe-", suffix=f".{name}") for name in ("out", "err")]
    for fd, _ in outs:
        os.close(fd)
    reaped = threading.Event()
    ended: dict[str, int] = {}

    def on_exit(pid: int, status: int, t_ns: int) -> None:
        ended.update(code=os.waitstatus_to_exitcode(status), t_ns=t_ns)
        reaped.set()

    spec = {"call": CHILD_CALL, "args": [mode, variant, str(root), history], "path": list(CHILD_PATH),
            "stdout": outs[0][1], "stderr": outs[1][1]}
    try:
        pids = ForkServer.shared(torch=uses_torch(variant)).spawn_group([spec], on_exit)
        if not reaped.wait(scaled(60)):  # a safety net: the child ends in about a second
            try:
                os.killpg(pids[0], signal.SIGKILL)
            except ProcessLookupError:
                pass
            reaped.wait(scaled())
        texts = [Path(path).read_text(errors="replace") for _, path in outs]
    finally:
        for _, path in outs:
            os.unlink(path)
    return pids[0], ended.get("code", -signal.SIGKILL), ended.get("t_ns", time.monotonic_ns()), texts[0], texts[1]


def _run_child(mode: str, variant: str, root: Path) -> tuple[float, list[str], str]:
    """Run the child; returns the seconds its exit hooks delayed exit (from main's return to the
    last hook), without the interpreter's own teardown, which load makes noisy.

    The child's history (read back from the file it writes last) and snapshots of the paths under ``root``
    before it starts and after it exited go to the checkers (:func:`harness.contract.rig.collect`), with
    the child's ``process_exited`` as the harness saw it."""
    from harness.contract.rig import collect
    from harness.history import Event, Recorder, read_jsonl

    fd, history = tempfile.mkstemp(prefix="lastcall-exit-probe-", suffix=".jsonl")
    os.close(fd)
    rec = Recorder(role="harness")
    taken = collect(rec)
    taken.snapshot("before", root)
    try:
        pid, returncode, exited, out, err = _spawn(mode, variant, root, history)
        taken.snapshot("after", root)
        events, _ = read_jsonl(history) if os.path.getsize(history) else ([], [])
    finally:
        os.unlink(history)
    for ev in events:
        rec.add(ev)
    if events:  # the child ran: its exit as the harness saw it (reaped), in its own pid
        rec.add(Event(exited, pid, "harness", "", "MainThread", "process_exited", {"status": returncode}))
    lines = out.splitlines()
    exiting = [int(x.split()[1]) for x in lines if x.startswith("exiting ")]
    done = [int(x.split()[1]) for x in lines if x.startswith("hooks-done ")]
    if returncode < 0 and exiting and done:
        # main returned and every exit hook ran, then the interpreter died on a signal while it finalized:
        # a thread still running then (torch aborts with "terminate called without an active exception"
        # when a daemon thread inside it is stopped). A listener whose stop said it was done left it
        # running: a verdict on the listener, not a broken probe.
        from harness.contract.rig import violated
        from harness.reference.serve import signal_name

        raise violated(f"the interpreter died on {signal_name(-returncode)} after its exit hooks ran: a thread "
                       f"was still running at finalization ({'; '.join(lines[:1])}); stderr ends: "
                       f"{err.strip()[-300:]}")
    if returncode != 0 or not exiting or not done:
        # not a verdict on the listener: the probe itself broke, so the check reports a crash (which
        # every contract test fails on) instead of counting it as a caught bug
        raise ExitProbeFailed(f"exit probe child ({mode}, {variant}) failed with status {returncode}; "
                              f"stdout: {lines[-5:]}; stderr ends: {err[-2000:]}")
    return (done[0] - exiting[0]) / 1e9, lines, err


class ExitProbeFailed(RuntimeError):
    """The child interpreter of an exit probe did not run to its end: no verdict either way."""


def exit_hook_bounded(variant: object, root: Path) -> None:
    """8. With listeners that cannot drain, exit hooks delay interpreter exit by about the budget only.

    The child's history is judged by checkers exit_hook_within (its exit hook, 1.5 s) and exit_without_stall
    (from main's return to the child reaped, 10 s); asserted here too: how long the exit hooks delayed exit."""
    from harness.contract.rig import violated

    name = getattr(variant, "name", str(variant))
    try:
        seconds, _, _ = _run_child("stuck", name, root)
    finally:
        _clean(root)
    bound = EXIT_BUDGET_S + scaled(1.0)
    if seconds > bound:
        raise violated(f"exit hooks delayed interpreter exit by {seconds:.2f}s with {STUCK_LISTENERS} "
                       f"undrainable listeners (budget {EXIT_BUDGET_S}s, bound {bound:.1f}s)")


def exit_hook_retries(variant: object, root: Path) -> None:
    """8. A listener whose stop timed out is stopped by the exit hook on a clean exit.

    The child's history and the paths before and after it are judged by checkers failed_stop_retried (the
    exit hook's stop returned True), registration_kept (the timed-out listener stayed registered) and
    no_leftover_paths; asserted here too: nothing left under the root."""
    from harness.contract.rig import violated

    name = getattr(variant, "name", str(variant))
    try:
        _, lines, _ = _run_child("retry", name, root)
        left = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    finally:
        _clean(root)
    if left:
        raise violated(f"after a clean exit the exit hook left {left} ({'; '.join(lines[:1])})")


def _clean(root: Path) -> None:
    """Remove what the child left under ``root`` (the check has looked at it already)."""
    for p in sorted(root.rglob("*"), reverse=True):
        try:
            if p.is_dir() and not p.is_symlink():
                p.rmdir()
            else:
                p.unlink()
        except FileNotFoundError:
            pass


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4])

