"""Every exception lastcall raises, in one place.

Two roots.  :class:`HarnessError`: lastcall's own (a bad argument, a launch that
failed, misuse of an API).  :class:`TargetError`: the system under test's (the
reference listener, its allocator, backend and client, a handshake listener):
what a run observes and judges, never a failure of lastcall itself.  Errors about
a value the caller passed also subclass the matching builtin
(``ValueError``/``TypeError``) so generic handlers still catch them.  Each
message names the bad value and, where known, the fix.  ``lastcall`` ends with
exit 2 on either kind (docs/cli.md).

Errors that travel over the wire carry an ``error_type`` (the reply key of
docs/stop-contract.md, wire protocol): ``bad_request``, ``state_consistency``, ``map_quarantined``,
``operation_failed``, ``shutting_down``.
"""

from __future__ import annotations

__all__ = [
    "HarnessError",
    "TargetError",
    "ConfigError",
    "SocketPathTooLong",
    "WireError",
    "FrameTooLarge",
    "FrameDecodeError",
    "BackendError",
    "BadRequest",
    "StateConsistency",
    "MapQuarantined",
    "OperationFailed",
    "ShuttingDown",
    "AllocatorTornDown",
    "ListenerError",
    "ListenerBusy",
    "ClientError",
    "RankError",
    "StateConsistencyError",
    "FailpointError",
    "InjectedFault",
    "HandshakeError",
    "PortInUse",
]


class HarnessError(Exception):
    """Root of every error lastcall raises on purpose."""


class TargetError(Exception):
    """Root of every error the system under test raises: what a run records and the checkers judge."""


class ConfigError(HarnessError, ValueError):
    """A bad argument to a public API: the message names the value and the fix."""


class SocketPathTooLong(ConfigError):
    """Raised before bind when a socket path does not fit sun_path (107 bytes + NUL)."""


class WireError(TargetError, ValueError):
    """A frame that cannot be accepted. ``error_type`` is always ``bad_request``."""

    error_type = "bad_request"


class FrameTooLarge(WireError):
    """The length prefix is zero or larger than max_frame: the framing is lost."""


class FrameDecodeError(WireError):
    """The body is not a msgpack map of the expected shape (types, keys, cmd)."""


class BackendError(TargetError):
    """An error a backend reports to its client, with the wire ``error_type``."""

    error_type = "operation_failed"

    def __init__(self, message: str, *, phase: str | None = None) -> None:
        super().__init__(message)
        self.phase = phase


class BadRequest(BackendError, ValueError):
    """The request is well framed but asks for something impossible (bad offset, group)."""

    error_type = "bad_request"


class StateConsistency(BackendError):
    """The request conflicts with the allocator's state (partially mapped, pending txn)."""

    error_type = "state_consistency"


class MapQuarantined(BackendError):
    """An offset whose earlier map failed half way and could not be rolled back."""

    error_type = "map_quarantined"


class OperationFailed(BackendError):
    """The operation itself failed (out of memory, an injected fault)."""

    error_type = "operation_failed"


class ShuttingDown(BackendError):
    """The listener began stopping before this request was dispatched."""

    error_type = "shutting_down"


class AllocatorTornDown(OperationFailed):
    """A backend call reached an allocator that was already torn down: always a bug."""


class ListenerError(TargetError):
    """A listener could not be started (bind failed, path refused)."""


class ListenerBusy(ListenerError):
    """start() on a (rank, pp) whose old listener could not be stopped; the old one is intact."""


class ClientError(TargetError):
    """A client-side request failed; ``rank`` names where ("pp1/rank3")."""

    def __init__(self, message: str, *, rank: str | None = None,
                 error_type: str | None = None, phase: str | None = None) -> None:
        super().__init__(f"{rank}: {message}" if rank else message)
        self.rank = rank
        self.error_type = error_type
        self.phase = phase


class RankError(ClientError):
    """One or more ranks failed a broadcast; ``failures`` maps rank label to error."""

    def __init__(self, message: str, failures: dict[str, ClientError]) -> None:
        super().__init__(message)
        self.failures = failures


class StateConsistencyError(ClientError):
    """A multi-rank operation whose outcome is unknown on some rank: state may differ."""


class FailpointError(HarnessError):
    """Misuse of the failpoint API (unknown action, waiting on an unarmed site)."""


class InjectedFault(TargetError):
    """Raised by a failpoint armed with action ``raise``."""


class HandshakeError(TargetError):
    """A handshake failed: no reply in time, an error reply, or a reply that cannot be decoded.

    The message names the listener's host:port and the (pp_rank, tp_rank) asked for.
    """


class PortInUse(ListenerError):
    """A listener could not bind its TCP port because something already holds it.

    Raised by ``start()`` (never a hang); the message names host:port and the fix.
    """
