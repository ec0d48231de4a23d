"""What ``lastcall bench`` compares: listener variants the workers load, and the requests sent to them.

Variants (``harness.bench.arms:NAME``, also in :data:`BENCH_VARIANTS`):

* ``TRACKING_NOOP``: the reference with connection tracking replaced by a
  no-op: accept and close touch the connection table without the listener
  lock and without the stop-flag check, stop cancels no read and snapshots no
  connection.  The table itself stays: the epoll loop looks connections up in
  it to serve them (kvcached, serving one connection at a time, needs none).
* ``PLANTED_DELAY_2US``: the reference whose backend call first spins a busy
  loop calibrated at import to take 2 us (:data:`BUSY_WAIT`, the measured
  size); its listener reports the calibration as a ``planted_delay_calibrated``
  event when it starts.  The bench's honesty check: it must be found slower.
* ``LEAKS_AN_FD``: the reference that keeps a duplicate of every accepted
  connection's fd open.  The bench's leak check must stop on it.

Flavours.  A worker loads its variant by spec; :func:`flavoured` wraps any spec
(a registered name or ``module:attribute``) as ``harness.bench.arms:<flavour>/<spec>``,
resolved by this module's ``__getattr__`` in the worker: the backend is the
no-op one (kvcached's VMM calls stubbed, as in the seed's measurement) or the
real allocator, and the listener's request-path events are off (``quiet``) or
sent to the harness as in every other run (``recorded``: about 90 us per
request here, which would bury a 2 us difference).  Every arm of a bench gets
the same flavour.

The harness side: :class:`Client` sends the ops of a workload (:data:`OPS`,
``map<N>`` for any N) to one worker socket, on a fresh connection per request
(kvcached's ``_send_and_receive_message``) or on one kept-alive connection.
"""

from __future__ import annotations

import ast
import difflib
import functools
import inspect
import itertools
import os
import re
import socket
import statistics
import textwrap
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol, cast

from harness.bench.interleave import Request, Step
from harness.errors import ConfigError
from harness.reference import wire
from harness.reference.backend import NoopBackend
from harness.reference.listener import WorkerListener, _Conn
from harness.reference.variants import Variant, load_variant
from harness.reference.worker import ReferenceWorker

__all__ = ["BusyWait", "BUSY_WAIT", "calibrate", "spin", "TrackingNoop", "PlantedDelay", "LeaksAnFd",
           "TRACKING_NOOP", "PLANTED_DELAY_2US", "LEAKS_AN_FD", "BENCH_VARIANTS", "BACKENDS", "flavoured",
           "OPS", "check_op", "Codec", "Client"]

PLANTED_DELAY_NS = 2000  # the planted delay per request
MAX_TIMED_WAITS = 1_000_000  # in-run waits a PlantedDelay listener keeps for its median
BACKENDS = ("noop", "allocator")  # worker backends a flavour may choose
OPS = ("kv_tensors_created", "map16", "unmap_pair")  # the default workload; map<N> maps N offsets
_MAP_OP = re.compile(r"map([1-9][0-9]{0,4})")


# ----------------------------------------------------------------- busy wait
def spin(iterations: int) -> None:
    """A busy loop of ``iterations`` empty turns: no clock read, no syscall, no yield."""
    for _ in range(iterations):
        pass


@dataclass(frozen=True)
class BusyWait:
    """A calibrated busy loop: how many turns, what they were meant to take and what they took."""

    iterations: int
    target_ns: int
    measured_ns: float  # median of timed runs, less the clock's own cost


def _timed(iterations: int, reps: int) -> float:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        spin(iterations)
        out.append(time.perf_counter_ns() - t0)
    return float(statistics.median(out))


CALIBRATION_TOLERANCE = 0.05  # calibration stops once a measured wait is this close to the target
CALIBRATION_TRIES = 20  # ... or after this many measurements (a busy machine moves the figure)


def calibrate(target_ns: int = PLANTED_DELAY_NS, reps: int = 301) -> BusyWait:
    """Size :func:`spin` to take ``target_ns`` on this interpreter and CPU, then measure what it takes.

    Returns: the turns and the median of ``reps`` timed waits of that many turns
        (less the clock's own cost); the sizing is repeated until that median is
        within CALIBRATION_TOLERANCE of the target or CALIBRATION_TRIES pass.
    """
    probe = 20_000
    per_turn = min(_timed(probe, 1) for _ in range(5)) / probe
    n = max(1, round(target_ns / per_turn))
    clock = _timed(0, reps)  # two clock reads and an empty call
    measured = _timed(n, reps) - clock
    for _ in range(CALIBRATION_TRIES):  # the per-turn cost of a short loop differs from a long one's
        if abs(measured - target_ns) <= CALIBRATION_TOLERANCE * target_ns:
            break
        n = max(1, round(n * target_ns / max(1.0, measured)))
        measured = _timed(n, reps) - clock
    return BusyWait(n, target_ns, measured)


BUSY_WAIT = calibrate()  # once per process, at import: in a worker, after the fork


# ----------------------------------------------------------------- listeners
def less_tracking(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A method of the reference, compiled from its own source with each ``with self._lock:`` block of its body
    unwrapped and each ``if self._stopping:`` block of it dropped: the reference's code less its tracking."""
    def strip(stmts: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for st in stmts:
            if isinstance(st, ast.With) and ast.unparse(st.items[0].context_expr) == "self._lock":
                out += strip(st.body)
            elif not (isinstance(st, ast.If) and ast.unparse(st.test) == "self._stopping"):
                out.append(st)
        return out or [ast.Pass()]

    lines, first = inspect.getsourcelines(fn)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, first - 1)  # a traceback points at the reference's line
    fdef = tree.body[0]
    assert isinstance(fdef, ast.FunctionDef)
    fdef.body = strip(fdef.body)
    namespace: dict[str, Any] = {}
    exec(compile(ast.fix_missing_locations(tree), inspect.getsourcefile(fn) or "<reference>", "exec"),
         fn.__globals__, namespace)
    made: Callable[..., Any] = namespace[fn.__name__]
    return made


class TrackingNoop(WorkerListener):
    """The reference with connection tracking a no-op (see the module docstring)."""

    def _begin_stop(self) -> None:
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
            self.rec.emit("stop_started", listener=self.label)
            self._cancel_reads([])
        self._wake()

    def _cancel_reads(self, victims: list[_Conn]) -> None:
        self.rec.emit("reads_cancelled", listener=self.label, n=0, conns=[])

    # the reference's own, made from its source less the lock and the stop check: they cannot drift from it
    _accept = less_tracking(WorkerListener._accept)
    _close = less_tracking(WorkerListener._close)


class PlantedDelay(WorkerListener):
    """The reference plus a calibrated busy wait (:data:`BUSY_WAIT`) before every backend call.

    Each wait is also timed as it runs (two clock reads, part of the planted
    cost); their median is reported as ``planted_delay_measured`` when the
    listener stops, beside the import-time ``planted_delay_calibrated``.
    """

    _waits: list[int]  # in-run wait durations (ns), up to MAX_TIMED_WAITS

    def start(self) -> None:
        self._waits = []
        super().start()
        self.rec.emit("planted_delay_calibrated", listener=self.label, **asdict(BUSY_WAIT))

    def stop(self, timeout: float | None = None) -> bool:
        torn_down = self.torn_down
        ok = super().stop(timeout)
        if ok and not torn_down and self._waits:
            self.rec.emit("planted_delay_measured", listener=self.label, n=len(self._waits),
                          median_ns=float(statistics.median(self._waits)))
        return ok

    def _call_backend(self, req: wire.Request) -> wire.Reply:
        t0 = time.perf_counter_ns()
        spin(BUSY_WAIT.iterations)
        if len(self._waits) < MAX_TIMED_WAITS:
            self._waits.append(time.perf_counter_ns() - t0)
        return super()._call_backend(req)


class LeaksAnFd(WorkerListener):
    """The reference that keeps a duplicate of every accepted connection open: one fd per request."""

    _leaked_upto = 0  # the newest connection number whose fd was duplicated

    def _on_readable(self, conn: _Conn) -> None:
        if conn.cid > self._leaked_upto:  # its first read
            self._leaked_upto = conn.cid
            os.dup(conn.sock.fileno())  # never closed, on purpose
        super()._on_readable(conn)


TRACKING_NOOP = Variant("TRACKING_NOOP", "none: connection tracking is a no-op (a benchmark arm)",
                        listener=TrackingNoop)
PLANTED_DELAY_2US = Variant("PLANTED_DELAY_2US", "a calibrated 2 us busy wait per request (a benchmark arm)",
                            listener=PlantedDelay)
LEAKS_AN_FD = Variant("LEAKS_AN_FD", "one fd leaked per accepted connection", listener=LeaksAnFd)
BENCH_VARIANTS: dict[str, Variant] = {v.name: v for v in (TRACKING_NOOP, PLANTED_DELAY_2US, LEAKS_AN_FD)}


# ------------------------------------------------------------------- flavours
def flavoured(spec: str, backend: str = "noop", record: bool = False) -> str:
    """The variant spec a worker loads to run ``spec`` with this backend and recording."""
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
    # load_target reads module:a.b.c as an attribute path: the inner spec's dots travel as "~"
    return f"{__name__}:{backend}+{'recorded' if record else 'quiet'}/{spec.replace('.', '~')}"


def _quiet(cls: type[WorkerListener]) -> type[WorkerListener]:
    def __init__(self: WorkerListener, *args: Any, **kwargs: Any) -> None:
        cls.__init__(self, *args, **kwargs)
        self._on = False  # request-path events off; lifecycle events still go out

    return cast(type[WorkerListener], type(f"Quiet{cls.__name__}", (cls,), {"__init__": __init__}))


def _noop_backend(cls: type[ReferenceWorker]) -> type[ReferenceWorker]:
    def __init__(self: ReferenceWorker, *args: Any, **kwargs: Any) -> None:
        kwargs["backend"] = NoopBackend()
        cls.__init__(self, *args, **kwargs)

    return cast(type[ReferenceWorker], type(f"Noop{cls.__name__}", (cls,), {"__init__": __init__}))


@functools.cache
def _flavour(name: str) -> Variant:
    head, _, spec = name.partition("/")
    spec = spec.replace("~", ".")  # see flavoured
    backend, _, record = head.partition("+")
    if backend not in BACKENDS or record not in ("quiet", "recorded") or not spec:
        raise AttributeError(f"{name!r} is not a flavoured variant (<backend>+quiet|recorded/<spec>)")
    base = load_variant(spec)
    return Variant(f"{base.name} [{head}]", base.bug,
                   listener=base.listener if record == "recorded" else _quiet(base.listener),
                   registry=base.registry,
                   worker=base.worker if backend == "allocator" else _noop_backend(base.worker))


def __getattr__(name: str) -> Variant:
    if "/" not in name:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _flavour(name)


# --------------------------------------------------------------------- client
def check_op(name: str) -> str:
    """``name`` if it is an op of the workload, else ConfigError with the nearest one."""
    if name in OPS or _MAP_OP.fullmatch(name):
        return name
    near = difflib.get_close_matches(name, OPS, n=1)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    raise ConfigError(f"unknown op {name!r}{hint} (known: {', '.join(OPS)}, or map<N> for N offsets)")


class Codec(Protocol):
    """A target's framing as the client needs it (the reference's :mod:`harness.reference.wire`, kvcached's
    PickleCodec): both put a 4-byte big-endian length before the body, so :func:`wire.recv_frame` reads either."""

    def encode_request(self, req: wire.Request, /) -> bytes: ...

    def decode_reply(self, body: bytes, /) -> wire.Reply: ...


class Client:
    """The workload's requests to one worker socket in its target's codec; offsets rotate over ``pages`` pages."""

    def __init__(self, path: str, *, pages: int, page_size: int, keep_alive: bool = False,
                 timeout: float = 30.0, codec: Codec | None = None) -> None:
        self.path = path
        self.codec: Codec = wire if codec is None else codec  # the target's wire format (the reference's: msgpack)
        self.pages, self.page_size = pages, page_size
        self.keep_alive = keep_alive
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._seq = itertools.count()
        self.offsets: list[int] = []

    def _connect(self) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.path)
        except OSError:
            s.close()
            raise
        return s

    def call(self, req: wire.Request, expect: str) -> wire.Reply:
        """One request and its reply; RuntimeError when the status is not ``expect``."""
        if self.keep_alive:
            if self._sock is None:
                self._sock = self._connect()
            self._sock.sendall(self.codec.encode_request(req))
            rep = self.codec.decode_reply(wire.recv_frame(self._sock))
        else:
            s = self._connect()
            try:
                s.sendall(self.codec.encode_request(req))
                rep = self.codec.decode_reply(wire.recv_frame(s))
            finally:
                s.close()
        if rep.status != expect:
            raise RuntimeError(f"{req.cmd} on {self.path}: expected {expect}, got {rep}")
        return rep

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def created(self) -> None:
        self.call(wire.Request(cmd="kv_tensors_created"), "success")

    def _pick(self, n: int) -> None:
        base = next(self._seq) * n
        self.offsets = [((base + j) % self.pages) * self.page_size for j in range(n)]

    def _map(self) -> None:
        rep = self.call(wire.Request(cmd="map_to_kv_tensors", offsets=self.offsets), "success")
        if len(rep.newly_mapped_offsets or ()) != len(self.offsets):
            raise RuntimeError(f"map mapped {rep.newly_mapped_offsets}, expected {len(self.offsets)} new offsets")

    def _unmap(self) -> None:
        self.call(wire.Request(cmd="unmap_from_kv_tensors", offsets=self.offsets), "success")

    def _unmap_pair(self) -> None:
        txn = f"t{next(self._seq)}"
        self.call(wire.Request(cmd="prepare_unmap_from_kv_tensors", offsets=self.offsets, transaction_id=txn),
                  "prepared")
        self.call(wire.Request(cmd="commit_unmap_from_kv_tensors", transaction_id=txn), "committed")

    def _pick_and_map16(self) -> None:
        self._pick(16)
        self._map()

    def op(self, name: str) -> Request:
        """What one request of op ``name`` runs (see :data:`OPS`): set-up and clean-up are untimed."""
        if name == "kv_tensors_created":
            return self.created
        if name == "unmap_pair":
            return Step(self._unmap_pair, before=self._pick_and_map16)
        n = int(_MAP_OP.fullmatch(check_op(name)).group(1))  # type: ignore[union-attr]
        if n > self.pages:
            raise ConfigError(f"op {name} maps {n} pages but the worker has {self.pages}")
        return Step(self._map, before=lambda: self._pick(n), after=self._unmap)
