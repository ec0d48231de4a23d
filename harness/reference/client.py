"""The engine-side client of the reference wire: one rank at a time, or every rank at once.

:class:`Target` is one worker rank, :func:`targets_for` lists an instance's (pp, tp) ranks, a
:class:`Connection` carries several requests to one rank, :func:`request` uses a fresh connection
per request (as kvcached does), and :class:`Client` broadcasts to every rank concurrently: ``map``
with rollback, ``unmap`` two-phase over several ranks.  Every exchange has a deadline (``timeout``,
else ``LASTCALL_IPC_TIMEOUT``, else 60 s); each request carries a fresh ``id`` its reply must echo.

Error handling: every message names the rank (``pp1/rank3: ...``).  A timeout, a vanished listener
or a bad reply is a ClientError, never a bare traceback (RequestNotSent when the request provably
never reached the rank); a broadcast raises RankError listing every failed rank; an operation whose
outcome on some rank is unknown raises StateConsistencyError: the ranks may now disagree.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import NoReturn

import msgspec

from harness import envvars
from harness.errors import ClientError, ConfigError, RankError, StateConsistencyError, WireError
from harness.events import label
from harness.reference import wire
from harness.reference.paths import socket_path

__all__ = ["DEFAULT_TIMEOUT", "TIMEOUT_ENV", "Target", "targets_for", "resolve_timeout", "RequestNotSent",
           "Connection", "request", "Client"]

DEFAULT_TIMEOUT = 60.0  # seconds around one exchange (kvcached's KVCACHED_IPC_TIMEOUT default)
TIMEOUT_ENV = "LASTCALL_IPC_TIMEOUT"  # overrides DEFAULT_TIMEOUT where no timeout is passed

_EXPECTED = {"kv_tensors_created": "success", "map_to_kv_tensors": "success", "unmap_from_kv_tensors": "success",
             "prepare_unmap_from_kv_tensors": "prepared", "commit_unmap_from_kv_tensors": "committed",
             "abort_unmap_from_kv_tensors": "aborted"}  # the status of a successful reply, per command
_WHY: tuple[tuple[type[Exception], str], ...] = (  # what a failed exchange says, by exception type
    (TimeoutError, "{step} {cmd} within {timeout:g}s at {path}"),
    (FileNotFoundError, "no socket at {path}: the worker is not listening (stopped, or never started)"),
    (ConnectionRefusedError, "connection refused at {path}: nothing listens there (a leftover socket file?)"),
    (WireError, "bad reply to {cmd} from {path}: {exc}"),
    (ConnectionError, "connection to {path} lost during {cmd}: {exc}"),
)


class RequestNotSent(ClientError):
    """The request never reached the rank (no socket, refused, or lost before the whole
    frame went out): the listener cannot have dispatched it, so nothing changed there."""


@dataclass(frozen=True)
class Target:
    """One worker rank: its socket path, tensor-parallel rank and pipeline stage."""

    path: str
    rank: int
    pp: int = 0

    @property
    def label(self) -> str:
        """The rank's name in every message, e.g. ``pp1/rank3`` (as the listener's label)."""
        return label(self.pp, self.rank)


def targets_for(ipc: str, tp: int, pp: int = 1, root: str | None = None) -> list[Target]:
    """Every rank of instance ``ipc``: stage 0 ranks 0..tp-1, then stage 1, and so on.

    Returns: ``tp * pp`` targets, stage-major, with paths from ``paths.socket_path``.
    Error handling: ConfigError for a tp or pp below 1 or a bad ipc name;
        SocketPathTooLong (a ConfigError) when a path would not fit sun_path.
    """
    for name, value in (("tp", tp), ("pp", pp)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name}={value!r}: must be an int >= 1 (ranks per stage, stages), e.g. {name}=2")
    return [Target(os.fspath(socket_path(ipc, r, p, root)), r, p) for p in range(pp) for r in range(tp)]


def resolve_timeout(timeout: float | None = None) -> float:
    """Returns: ``timeout`` if given, else ``LASTCALL_IPC_TIMEOUT``, else 60 (seconds).

    Error handling: ConfigError naming the value (or the variable) unless it is a positive finite number.
    """
    if timeout is None:
        return envvars.number(TIMEOUT_ENV)  # bounded and finite, or ConfigError naming the variable
    value = timeout if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) else math.nan
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"timeout={timeout!r}: must be a positive number of seconds, e.g. {DEFAULT_TIMEOUT:g}")
    return float(value)


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("deadline passed")
    return left


class Connection:
    """One connection to one rank, kept alive across requests; thread-safe (one exchange at a time).

    It connects on the first request.  A failed exchange drops the socket (a late reply must not pass
    for the next one's); the next request connects afresh.  A kept-alive socket the listener closed
    while idle is replaced at once when the request provably was not sent.
    """

    def __init__(self, target: Target, *, timeout: float | None = None) -> None:
        self.target = target
        self.timeout = resolve_timeout(timeout)
        self._lock = threading.Lock()  # one exchange at a time
        self._sock: socket.socket | None = None
        self._closed = False

    def request(self, req: wire.Request) -> wire.Reply:
        """Send ``req`` (with a fresh ``id`` unless it has one) and read its reply.

        Returns: the reply, whatever its status (an ``error`` reply is returned, not raised).
        Error handling: ClientError naming the rank and path on timeout, connection error, a malformed
            reply or a mismatched id; RequestNotSent when it never reached the rank (or after close()).
        """
        if req.id is None:
            req = msgspec.structs.replace(req, id=uuid.uuid4().hex)
        data = wire.encode_request(req)
        with self._lock:
            if self._closed:
                raise RequestNotSent(f"connection to {self.target.path} is closed; open a new Connection",
                                     rank=self.target.label)
            reused = self._sock is not None
            try:
                reply = self._exchange(req.cmd, data)
            except RequestNotSent:
                if not reused:
                    raise
                reply = self._exchange(req.cmd, data)  # a stale kept-alive socket: once more, fresh
            if reply.id == req.id:
                return reply
            self._drop()
        if reply.id is None and reply.status == "error":  # the listener could not read our frame
            raise ClientError(f"{req.cmd} refused before dispatch: {reply.message}", rank=self.target.label,
                              error_type=reply.error_type, phase=reply.phase)
        raise ClientError(f"reply id {reply.id!r} does not match request id {req.id!r} for {req.cmd} at "
                          f"{self.target.path}; the connection was out of step and is closed", rank=self.target.label)

    def _exchange(self, cmd: str, data: bytes) -> wire.Reply:
        """One request/reply under the lock; drops the socket on any failure."""
        deadline = time.monotonic() + self.timeout
        sent = False
        try:
            sock = self._sock
            if sock is None:
                sock = self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(_left(deadline))
                sock.connect(self.target.path)
            sock.settimeout(_left(deadline))
            sock.sendall(data)
            sent = True
            size = wire.parse_length(self._recv(sock, wire.HEADER.size, deadline))
            return wire.decode_reply(self._recv(sock, size, deadline))
        except (OSError, WireError) as exc:
            self._drop()
            raise self._error(cmd, exc, sent) from exc

    @staticmethod
    def _recv(sock: socket.socket, n: int, deadline: float) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            sock.settimeout(_left(deadline))
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise wire.PeerClosed(f"peer closed after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def _error(self, cmd: str, exc: Exception, sent: bool) -> ClientError:
        text = next((t for kind, t in _WHY if isinstance(exc, kind)), "{cmd} to {path} failed: {exc!r}")
        why = text.format(cmd=cmd, path=self.target.path, exc=exc, timeout=self.timeout,
                          step="no reply to" if sent else "could not send")
        return (ClientError if sent else RequestNotSent)(why, rank=self.target.label)

    def _drop(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def close(self) -> None:
        """Close the socket; later requests raise ClientError.  Idempotent; never raises."""
        self._closed = True
        sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes an exchange in progress on another thread
        with self._lock:
            self._drop()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def request(target: Target, req: wire.Request, *, timeout: float | None = None) -> wire.Reply:
    """One request on a fresh connection, closed afterwards (what kvcached does per message).

    Returns: the reply, whatever its status.  Error handling: as :meth:`Connection.request`.
    """
    with Connection(target, timeout=timeout) as conn:
        return conn.request(req)


def _outcome_unknown(err: ClientError) -> bool:
    """A failure after which the rank may or may not have applied the request."""
    return err.error_type is None and not isinstance(err, RequestNotSent)


def _rank_error(what: str, failures: dict[str, ClientError], total: int) -> RankError:
    detail = "; ".join(str(e) for e in failures.values())
    return RankError(f"{what} failed on {len(failures)} of {total} ranks: {detail}", failures)


Outcome = tuple[dict[str, wire.Reply], dict[str, ClientError]]


class Client:
    """The engine's side of every rank of one instance; thread-safe.

    ``keep_alive=True`` keeps one :class:`Connection` per rank, else each request opens a fresh one.
    Requests to several ranks run concurrently on a thread pool (one thread per rank, made on first use).
    Error handling: ConfigError for no targets, a duplicate rank or a bad timeout.
    """

    connection: type[Connection] = Connection  # how one rank is spoken to (a planted bug changes it)

    def __init__(self, targets: Sequence[Target], *, timeout: float | None = None, keep_alive: bool = False) -> None:
        self.targets = tuple(targets)
        if not self.targets or not all(isinstance(t, Target) for t in self.targets):
            raise ConfigError(f"targets={list(self.targets)!r}: pass one or more Target, e.g. "
                              "targets_for('engine0', tp=1)")
        labels = [t.label for t in self.targets]
        dups = sorted({lb for lb in labels if labels.count(lb) > 1})
        if dups:
            raise ConfigError(f"targets name {', '.join(dups)} more than once; list each rank once")
        self.timeout = resolve_timeout(timeout)
        self.keep_alive = keep_alive
        self._conns = {t.label: self.connection(t, timeout=self.timeout) for t in self.targets} if keep_alive else {}
        self._lock = threading.Lock()  # guards _pool and _closed
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False

    def _send(self, target: Target, req: wire.Request) -> wire.Reply | ClientError:
        """One rank's exchange; a failure (or an error / unexpected status) is returned, not raised."""
        try:
            if self.keep_alive:
                reply = self._conns[target.label].request(req)
            else:
                with self.connection(target, timeout=self.timeout) as conn:  # a fresh one, as request() does
                    reply = conn.request(req)
        except ClientError as exc:
            return exc
        expected = "committed" if req.cmd == "prepare_unmap_from_kv_tensors" and req.commit else _EXPECTED[req.cmd]
        if reply.status == expected:
            return reply
        if reply.status == "error":
            return ClientError(f"{req.cmd} failed: {reply.message}", rank=target.label,
                               error_type=reply.error_type, phase=reply.phase)
        return ClientError(f"{req.cmd} answered status {reply.status!r}, expected {expected!r}", rank=target.label)

    def _gather(self, jobs: Sequence[tuple[Target, wire.Request]]) -> Outcome:
        """Run every (target, request) concurrently; replies and failures keyed by label, in target order."""
        with self._lock:
            if self._closed:
                raise ClientError("client is closed; create a new Client")
            if len(jobs) > 1 and self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=len(self.targets), thread_name_prefix="lastcall-client")
            pool = self._pool
        if pool is None or len(jobs) == 1:
            results = [self._send(t, r) for t, r in jobs]
        else:
            futures = [pool.submit(self._send, t, r) for t, r in jobs]
            results = [f.result() for f in futures]
        pairs = [(t.label, res) for (t, _), res in zip(jobs, results, strict=True)]
        return ({lb: r for lb, r in pairs if not isinstance(r, ClientError)},
                {lb: r for lb, r in pairs if isinstance(r, ClientError)})

    def _all(self, req: wire.Request) -> Outcome:
        return self._gather([(t, req) for t in self.targets])

    def _unknown(self, what: str, labels: Sequence[str], detail: str) -> StateConsistencyError:
        order = ", ".join(t.label for t in self.targets if t.label in labels)
        return StateConsistencyError(f"{what}: outcome unknown, ranks may now differ; {detail}", rank=order)

    def _fail(self, what: str, failures: dict[str, ClientError], undo_failed: dict[str, ClientError]) -> NoReturn:
        """Raise RankError for ``failures``, or StateConsistencyError (caused by it) when a failed
        rank may have applied the request (no reply after it went out) or a rollback failed."""
        err = _rank_error(what, failures, len(self.targets))
        unknown = [lb for lb, e in failures.items() if _outcome_unknown(e)]
        if unknown or undo_failed:
            parts = [f"{lb}: no reply, it may have applied the {what}" for lb in unknown]
            parts += [f"rollback failed: {e}" for e in undo_failed.values()]
            raise self._unknown(what, [*unknown, *undo_failed], "; ".join(parts)) from err
        raise err

    def broadcast(self, req: wire.Request) -> dict[str, wire.Reply]:
        """Send ``req`` to every rank concurrently.

        Returns: every rank's reply keyed by label, in target order.
        Error handling: RankError listing every failed rank (``failures``: label -> ClientError); an
            ``error`` reply counts as failed, its error_type and phase kept.  ClientError once closed.
        """
        replies, failures = self._all(req)
        if failures:
            raise _rank_error(req.cmd, failures, len(self.targets))
        return replies

    def kv_tensors_created(self, group_id: int = 0) -> bool:
        """Returns: True only when every rank says group ``group_id``'s KV tensors exist.
        Error handling: RankError when a rank fails to answer."""
        replies = self.broadcast(wire.Request(cmd="kv_tensors_created", group_id=group_id))
        return all(r.created is True for r in replies.values())

    def map(self, offsets: Sequence[int], group_id: int = 0) -> list[int]:
        """Map ``offsets`` on every rank.

        Returns: the offsets newly mapped, in the first rank's order (then any only another rank mapped).
        Error handling: when any rank fails, each rank that succeeded unmaps what it newly mapped, then
            RankError names the failed ranks; StateConsistencyError (caused by that RankError) instead
            when a rollback failed, or a failed rank may have mapped (no reply after the request went out).
        """
        req = wire.Request(cmd="map_to_kv_tensors", group_id=group_id, offsets=list(offsets))
        replies, failures = self._all(req)
        if not failures:
            return list(dict.fromkeys(off for r in replies.values() for off in r.newly_mapped_offsets or []))
        undo = [(t, wire.Request(cmd="unmap_from_kv_tensors", group_id=group_id,
                                 offsets=list(replies[t.label].newly_mapped_offsets or [])))
                for t in self.targets if t.label in replies and replies[t.label].newly_mapped_offsets]
        self._fail(f"map of {req.offsets}", failures, self._gather(undo)[1] if undo else {})

    def unmap(self, offsets: Sequence[int], group_id: int = 0) -> None:
        """Unmap ``offsets`` on every rank: ``unmap_from_kv_tensors`` for a single target, else two-phase
        (prepare all, commit all) under a fresh transaction id.

        Returns: None once every rank has released the pages.
        Error handling: a failed prepare aborts the transaction on every rank (pages stay mapped) and
            raises RankError naming the failed ranks (and any whose abort failed too).  A failed commit
            is retried once; failing again, StateConsistencyError names the ranks (the others released
            the pages).  Single target: as :meth:`map` without the rollback.
        """
        offsets = list(offsets)
        n = len(self.targets)
        if n == 1:
            _, failures = self._all(wire.Request(cmd="unmap_from_kv_tensors", group_id=group_id, offsets=offsets))
            if failures:
                self._fail(f"unmap of {offsets}", failures, {})
            return
        txn = uuid.uuid4().hex
        _, failures = self._all(wire.Request(cmd="prepare_unmap_from_kv_tensors", group_id=group_id,
                                             offsets=offsets, transaction_id=txn))
        if failures:
            err = _rank_error(f"prepare of unmap transaction {txn}", failures, n)
            _, abort_failed = self._all(wire.Request(cmd="abort_unmap_from_kv_tensors", group_id=group_id,
                                                     transaction_id=txn))
            if abort_failed:
                raise RankError(f"{err}; abort failed too, the transaction may stay pending there: "
                                + "; ".join(str(e) for e in abort_failed.values()), failures) from None
            raise err
        commit = wire.Request(cmd="commit_unmap_from_kv_tensors", group_id=group_id, transaction_id=txn)
        _, failed = self._all(commit)
        if failed:
            _, still = self._gather([(t, commit) for t in self.targets if t.label in failed])
            if still:
                raise self._unknown(f"commit of unmap transaction {txn} failed twice (the other ranks "
                                    "committed)", list(still), "; ".join(str(e) for e in still.values()))

    def close(self) -> None:
        """Close kept-alive connections and stop the thread pool.  Idempotent; never raises."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        for conn in self._conns.values():
            conn.close()
        if pool is not None:
            pool.shutdown(wait=True)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
