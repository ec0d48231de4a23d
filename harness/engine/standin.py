"""A well-behaved stand-in for ``vllm serve``: the engine scenarios' negative control, and its planted bugs.

``python -m harness.engine.standin serve --port P [--variant V] [vLLM's flags]`` starts a tree shaped like
vLLM's:

* the **API server** (this process, the session leader) answers ``GET /health`` (200; 503 once shutdown
  began) and ``POST /v1/completions`` (OpenAI's completion object, or with ``"stream": true`` server-sent
  events ending ``data: [DONE]``; a request once shutdown began is refused with 503 ``shutting down``): its
  HTTP side, with the drain of the requests in flight, is harness.engine.standin_http;
* it forks the **engine core** (renamed ``VLLM::EngineCore``, truncated by the kernel as vLLM's is), which
  binds a Unix socket under ``VLLM_RPC_BASE_PATH`` (else TMPDIR), writes a state file in TMPDIR and forks
  its **workers** (``VLLM::Worker``; ``VLLM::Worker_TP<i>`` with ``--tensor-parallel-size`` N > 1);
* once the tree is whole and the port bound it prints vLLM's ready line ``Application startup complete``.

vLLM's own flags, with vLLM 0.32's meaning:

* ``--tensor-parallel-size N``: N worker processes under the engine core;
* ``--shutdown-timeout S`` (seconds, default 0; vLLM's are whole, the stand-in's may be less): on SIGTERM or
  SIGINT requests in flight may finish for up to S seconds while new ones are refused (the HTTP server stays
  up meanwhile, as vLLM's does); then, or at once with 0, they are aborted (``finish_reason: "abort"``);
* ``--kv-transfer-config '{"kv_connector": "NixlConnector", ...}'``: the engine core listens on NIXL's TCP
  side channel, ``VLLM_NIXL_SIDE_CHANNEL_HOST:VLLM_NIXL_SIDE_CHANNEL_PORT`` (default localhost:5600); a port
  that cannot be bound fails the start with one ``ERROR:`` line and a non-zero exit, nothing left; the
  listener is closed at shutdown.

Stopping, correctly: SIGTERM or SIGINT to the API server prints vLLM's ``[shutdown] API server: shutdown
triggered`` once admission is closed, drains or aborts the requests in flight (a connection whose client
stopped reading is closed after a grace: a stalled reader cannot hold the stop), then stops its engine core
(a stop byte on its control pipe), which stops its workers, waits for them (a bound, then SIGKILL of a worker
that neither answered nor died: a paused one), removes its socket and file, closes its side channel and exits
0; the API server exits 0 once its engine core is reaped (the same bound, then SIGKILL, and it removes what a
killed one left): children first, nothing left.  A signal to the engine core or a worker stops that part the
same way, and the API server, finding its engine core gone unasked, exits 1.  SIGKILL of the API server: the
engine core sees its control pipe close without a stop byte and stops as above (a parent-death watch, as vLLM's
engine core has).  A stop signal during the start stops the tree before it is ready.  Everything waits on file
descriptors (a signal wake-up pipe, pipes, pidfds): no polling, no sleeps.  Only the standard library: it
starts in well under a second.

The start gate (the harness's ``engine_start`` step): when the run directory (the tree's cwd) holds a Unix
socket ``start-gate.sock``, the engine core connects to it while it "loads the model", and goes on only once
the harness closes it, so a signal can land while the engine is still starting.  Real vLLM has no gate (its
start takes tens of seconds on its own).

The planted-bug variants (``--variant``), each one defect of the kinds the engine checkers judge:
``ignores_sigterm`` (the API server ignores SIGTERM), ``leaves_socket_file`` (the engine core does not
remove its socket file), ``keeps_child`` (the worker outlives its engine core: it ignores its parent's
exit, and holds the API server's listening socket, inherited: a restart cannot bind),
``exits_zero_after_engine_died`` (the API server exits 0 although its engine core died), ``hangs_stream``
(a stream in flight at SIGTERM never ends and never errors: the stop waits for it forever),
``loses_signal_during_start`` (SIGTERM is ignored until the tree is ready: one sent during the start is
lost and the tree keeps running), ``waits_on_paused_child`` (a stop waits however long its child takes, with
no bound and no SIGKILL: a paused worker or engine core holds the stop), ``keeps_port`` (the engine core
inherits the API server's listening socket and has no parent-death watch: after the API server dies it lives
on holding the port), ``late_generation`` (a request that arrives after shutdown began is admitted and
generated), ``hangs_on_held_side_channel`` (a held NIXL side-channel port kills the engine core's listener
thread and the start waits for it forever, as vLLM's does: the failure is printed, the start never ends),
``aborts_within_drain`` (``--shutdown-timeout`` is ignored: requests in flight are aborted at once),
``skips_reap_during_start`` (the API server, its engine core dead during the start, exits without reaping it:
it never learns that it was killed, so the socket and state file of a killed one are left).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import select
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable

from harness.engine.standin_flags import Options, bounded, seconds, side_channel
from harness.engine.standin_http import _drain, _Server, _State

__all__ = ["VARIANTS", "READY_LINE", "SHUTDOWN_LINE", "GATE", "main"]

VARIANTS = ("standin", "ignores_sigterm", "leaves_socket_file", "keeps_child", "exits_zero_after_engine_died",
            "hangs_stream", "loses_signal_during_start", "keeps_port", "late_generation",
            "hangs_on_held_side_channel", "waits_on_paused_child", "aborts_within_drain", "skips_reap_during_start")
READY_LINE = "INFO:     Application startup complete."
SHUTDOWN_LINE = "INFO:     [shutdown] API server: shutdown triggered"  # vLLM's own words (its launcher)
GATE = "start-gate.sock"  # in the tree's cwd (the run directory): the harness's start gate
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
WORKER_STOP_GRACE_S = 0.5  # seconds a stopped child has to exit before its SIGKILL: a paused one must not hold
CORE_STOP_GRACE_S = 1.0  # the stop; the engine core's grace covers its workers'
MAX_TP = 16


def _rename(name: str) -> None:
    """PR_SET_NAME, as vLLM renames its processes (the kernel keeps 15 bytes)."""
    ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)


def _signal_pipe(sigs: tuple[int, ...]) -> int:
    """A pipe the given signals wake (a handler that does nothing, and the wake-up fd); its read end."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    signal.set_wakeup_fd(w)
    for s in sigs:
        signal.signal(s, lambda *_: None)
    return r


def _fork_child(child: Callable[[int, int], int]) -> tuple[int, int, int]:
    """Fork ``child(ctl_r, ready_w)``; in the parent (pid, ctl_w, ready_r): a byte on ctl_w (then its close)
    stops the child, its close alone is the parent's death; ready_r gets a byte once the child is ready (EOF if
    it died first)."""
    ctl_r, ctl_w = os.pipe()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ctl_w)
        os.close(ready_r)
        code = 1
        try:
            code = child(ctl_r, ready_w)
        finally:
            os._exit(code)
    os.close(ctl_r)
    os.close(ready_w)
    return pid, ctl_w, ready_r


def _stop(ctl_w: int) -> None:
    """Ask a child to stop (a stop byte, then the close); a child gone already is no error."""
    try:
        os.write(ctl_w, b"s")
    except OSError:
        pass
    os.close(ctl_w)


def _reap(children: list[tuple[int, int]], grace: float, o: Options) -> list[int]:
    """Wait for children asked to stop, (pid, pidfd) each: up to ``grace`` seconds in all, then SIGKILL of those
    still there (a paused child never exits by itself); their exit codes.  waits_on_paused_child: waits
    however long it takes."""
    end = time.monotonic() + grace
    codes = []
    for pid, fd in children:
        if o.variant != "waits_on_paused_child" and not select.select([fd], [], [], max(0, end - time.monotonic()))[0]:
            print(f"WARNING:  pid {pid} did not exit {grace:g}s after its stop: killing it", flush=True)
            os.kill(pid, signal.SIGKILL)  # it works on a stopped process too
        _, status = os.waitpid(pid, 0)
        codes.append(os.waitstatus_to_exitcode(status))
    return codes


# --------------------------------------------------------------------- the workers
def _worker(o: Options, rank: int) -> Callable[[int, int], int]:
    def run(parent_r: int, ready_w: int) -> int:
        _rename("VLLM::Worker" if o.tp == 1 else f"VLLM::Worker_TP{rank}")
        sig_r = _signal_pipe(STOP_SIGNALS)
        os.write(ready_w, b"w")
        os.close(ready_w)
        watch = [sig_r] if o.variant == "keeps_child" else [sig_r, parent_r]  # keeps_child: blind to its parent
        select.select(watch, [], [])
        return 0
    return run


# ---------------------------------------------------------------- the engine core
def _wait_gate(sig_r: int, ctl_r: int) -> bool:
    """The start gate, if the run directory holds one: connect, say so, and wait until the harness closes it;
    False when a stop (a signal, the control pipe) came first."""
    if not os.path.exists(GATE):
        return True
    gate = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        gate.connect(GATE)
    except OSError:
        gate.close()
        return True
    print("INFO:     EngineCore: loading the model (the harness holds the start gate)", flush=True)
    with gate:
        readable, _, _ = select.select([sig_r, ctl_r, gate.fileno()], [], [])
    return sig_r not in readable and ctl_r not in readable


def _engine_core(o: Options) -> Callable[[int, int], int]:
    def run(ctl_r: int, ready_w: int) -> int:
        _rename("VLLM::EngineCore")
        sig_r = _signal_pipe(STOP_SIGNALS)
        made: list[str] = []
        held: list[socket.socket] = []
        workers: list[tuple[int, int, int]] = []
        try:
            if o.side_channel is not None:
                side = socket.socket()
                try:
                    side.bind(o.side_channel)
                except OSError as exc:
                    side.close()
                    print(f"ERROR: EngineCore: NIXL side channel: cannot listen on {o.side_channel[0]}:"
                          f"{o.side_channel[1]}: {exc.strerror or exc}", flush=True)
                    if o.variant == "hangs_on_held_side_channel":  # the start waits for a listener that died
                        threading.Event().wait()
                    return 1
                side.listen()
                held.append(side)
            base = os.environ.get("VLLM_RPC_BASE_PATH") or tempfile.gettempdir()
            sock_path = os.path.join(base, f"standin-engine-{os.getpid()}.sock")
            state_path = os.path.join(tempfile.gettempdir(), f"standin-engine-{os.getpid()}.state")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            held.append(sock)
            sock.bind(sock_path)
            if o.variant != "leaves_socket_file":
                made.append(sock_path)
            sock.listen()
            with open(state_path, "w") as f:
                f.write(f"{os.getpid()}\n")
            made.append(state_path)
            if not _wait_gate(sig_r, ctl_r):
                print("INFO:     EngineCore: stopped during its start", flush=True)
                return 0
            for rank in range(o.tp):
                pid, w_w, w_ready = _fork_child(_worker(o, rank))
                workers.append((pid, w_w, os.pidfd_open(pid)))
                if not os.read(w_ready, 1):
                    print(f"ERROR: EngineCore: worker {rank} died during start", flush=True)
                    return 1
                os.close(w_ready)
            os.write(ready_w, b"e")
            os.close(ready_w)
            watch = [sig_r, ctl_r, *(fd for _, _, fd in workers)]
            while True:
                readable, _, _ = select.select(watch, [], [])
                if ctl_r in readable and not os.read(ctl_r, 1) and o.variant == "keeps_port":
                    watch.remove(ctl_r)  # keeps_port: its parent died; it does not care
                    continue
                return 1 if any(fd in readable for _, _, fd in workers) else 0
        finally:
            for _, w_w, _ in workers:
                _stop(w_w)  # keeps_child: its workers do not listen
            if o.variant != "keeps_child":
                _reap([(pid, fd) for pid, _, fd in workers], WORKER_STOP_GRACE_S, o)
            for s in held:
                s.close()
            for path in made:
                os.unlink(path)
    return run


def _stop_core(pid: int, core_fd: int, o: Options) -> int:
    """Wait for the engine core asked to stop (a bound, then SIGKILL); a killed one's socket and state file are
    removed here, as it could not (nothing a stop leaves behind).  Its exit code."""
    code = _reap([(pid, core_fd)], CORE_STOP_GRACE_S, o)[0]
    _remove_left(pid, code)
    return code


def _remove_left(pid: int, code: int) -> None:
    """What the engine core ``pid``, reaped with exit code ``code``, could not remove itself: a killed one's
    socket and state file (nothing a stop or a failed start leaves behind)."""
    if code == -signal.SIGKILL:
        base = os.environ.get("VLLM_RPC_BASE_PATH") or tempfile.gettempdir()
        for path in (os.path.join(base, f"standin-engine-{pid}.sock"),
                     os.path.join(tempfile.gettempdir(), f"standin-engine-{pid}.state")):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def serve(port: int, o: Options) -> int:
    sigs = (signal.SIGINT,) if o.variant == "ignores_sigterm" else STOP_SIGNALS
    st = _State(o)
    sig_r = _signal_pipe(sigs)
    if o.variant in ("ignores_sigterm", "loses_signal_during_start"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # loses_signal_during_start: until it is ready
    print(f"INFO:     vLLM API server version standin ({o.variant})", flush=True)
    # keeps_child / keeps_port bind their port before they fork: the tree inherits the listening socket
    httpd = _Server(port, st) if o.variant in ("keeps_child", "keeps_port") else None
    pid, ctl_w, ready_r = _fork_child(_engine_core(o))
    core_fd = os.pidfd_open(pid)
    readable, _, _ = select.select([sig_r, ready_r], [], [])
    if sig_r not in readable:
        # The kernel's select returns the ready pipe without EINTR when the engine core wrote it before this
        # process ran again, though a SIGTERM came first (the harness signals, then opens the start gate); a
        # signal pending then is delivered as the call returns, so its wake-up byte is there by now.
        readable += select.select([sig_r], [], [], 0)[0]
    if sig_r in readable:
        print("INFO:     Shutdown requested during start: stopping the engine core", flush=True)
        _stop(ctl_w)
        _stop_core(pid, core_fd, o)
        return 0
    if not os.read(ready_r, 1):
        if o.variant == "skips_reap_during_start":  # never reaped: how it died is never known
            return 1
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        _remove_left(pid, code)  # a killed one's files: the start failed, and left nothing
        print(f"ERROR: the engine core died during start (status {code})", flush=True)
        return 0 if o.variant == "exits_zero_after_engine_died" else 1
    if o.variant == "loses_signal_during_start":
        signal.signal(signal.SIGTERM, lambda *_: None)  # the handler comes now: a SIGTERM before it was lost
    httpd = httpd or _Server(port, st)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), name="standin-http", daemon=True).start()
    print(f"INFO:     Started server process [{os.getpid()}]", flush=True)
    print(READY_LINE, flush=True)
    readable, _, _ = select.select([sig_r, core_fd], [], [])
    died = core_fd in readable
    if died:
        st.engine_dead.set()
        print("ERROR: the engine core died unexpectedly", flush=True)
    with st.lock:
        st.shutting_down.set()  # admission is closed before the line says so
    print(SHUTDOWN_LINE, flush=True)
    _drain(st)
    httpd.shutdown()
    httpd.server_close()
    _stop(ctl_w)  # stop the engine core; it stops its workers first
    code = _stop_core(pid, core_fd, o)
    print(f"INFO:     Shutting down: engine core exited with {code}", flush=True)
    if died and o.variant != "exits_zero_after_engine_died":
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.engine.standin")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sv = sub.add_parser("serve", help="serve like `vllm serve` (a model argument, if given, is ignored)")
    sv.add_argument("model", nargs="?", default="standin")
    sv.add_argument("--port", type=int, required=True)
    sv.add_argument("--variant", choices=VARIANTS, default="standin")
    sv.add_argument("--token-interval", type=float, default=0.01, help="seconds per generated token")
    sv.add_argument("--tensor-parallel-size", "-tp", type=bounded(1, MAX_TP), default=1,
                    help="worker processes under the engine core (vLLM's flag)")
    sv.add_argument("--shutdown-timeout", type=seconds(0, 3600), default=0,
                    help="seconds requests in flight may finish after SIGTERM; 0: abort (vLLM's flag)")
    sv.add_argument("--kv-transfer-config", default=None, help="vLLM's KV connector config (JSON)")
    a, _ = ap.parse_known_args(argv)  # vLLM's other options (--dtype, ...) are accepted and ignored
    try:
        o = Options(a.variant, a.token_interval, a.tensor_parallel_size, a.shutdown_timeout,
                    side_channel(a.kv_transfer_config))
        return serve(a.port, o)
    except (OSError, ValueError) as exc:
        print(f"ERROR: {exc}", flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
