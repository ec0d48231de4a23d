"""The reference KV allocator: the backend a worker listener dispatches into.

Pages of ``page_size`` bytes, addressed by byte offset.  Each group holds
``tensors_per_group`` KV tensors (K and V); an offset is *mapped* once every tensor
of its group holds a real block for it.  On ``device="cpu"`` a block is an anonymous memory map of
``page_size`` bytes (``mmap.mmap(-1, page_size)``: memory held until unmapped, as a CPU tensor's is, without
torch); on any other device it is ``torch.empty(page_size, dtype=torch.uint8, device=device)``,
and only then is torch imported (a CPU worker's process never loads it, so it does not carry torch's module
teardown into a faithful exit, where it would lengthen every run's end).  Unmapping drops the references:
memory is really held and freed.

Rules (errors are :mod:`harness.errors` classes naming the value and the fix):

* Bad arguments (offset misaligned, negative, past the capacity, unknown group,
  bad capacity or transaction id) raise :class:`~harness.errors.BadRequest`;
  bad constructor arguments raise :class:`~harness.errors.ConfigError`.
* Map allocates page by page, tensor by tensor.  If an allocation fails it rolls
  back what this call mapped and raises :class:`~harness.errors.OperationFailed`.
  An offset whose rollback fails is quarantined until teardown: a later map of it
  raises :class:`~harness.errors.MapQuarantined`.
* At most one two-phase unmap is pending; while it is, map, unmap and prepare
  raise :class:`~harness.errors.StateConsistency`.  Transaction ids are single
  use: commit is idempotent, abort of an unknown id is remembered so that a late
  prepare with it is refused, abort after commit is refused (``phase="commit"``).
* After :meth:`KVAllocator.teardown` every operation raises
  :class:`~harness.errors.AllocatorTornDown`.

Failure injection: ``on_page(op, group_id, offset)`` is called under the lock with
``op="map"`` before each block allocation (once per tensor) and ``op="rollback"``
before each release in a map's rollback; an exception from it counts as that
allocation (or release) failing.  It must not call back into the allocator.
"""

from __future__ import annotations

import mmap
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch  # imported where a tensor is made, off the CPU: a process that makes none never loads torch

from harness.errors import (
    AllocatorTornDown,
    BadRequest,
    ConfigError,
    MapQuarantined,
    OperationFailed,
    StateConsistency,
)

__all__ = ["DEFAULT_PAGE_SIZE", "KVAllocator", "MiB", "PageHook"]

MiB = 1 << 20
DEFAULT_PAGE_SIZE = 2 * MiB

CPU = "cpu"  # the device whose blocks are anonymous memory maps, not torch tensors

PageHook = Callable[[str, int, int], None]
"""``on_page(op, group_id, offset)``; ``op`` is ``"map"`` or ``"rollback"``."""


@dataclass
class _Group:
    capacity: int
    tensors: list[dict[int, torch.Tensor | mmap.mmap]]
    quarantined: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class _Pending:
    transaction_id: str
    group_id: int
    offsets: tuple[int, ...]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class KVAllocator:
    """Pages of memory per KV group, with a two-phase unmap; thread-safe.

    Args:
        page_size: bytes per page, a positive int.
        device: where the blocks live: "cpu" (anonymous memory maps, no torch) or another torch
            device ("cuda:0"); torch is imported, and CUDA touched, only when the device names it.
        tensors_per_group: KV tensors per group (2: K and V), at least 1.
        on_page: failure-injection hook, see the module docstring.

    Error handling:
        Raises ConfigError for a bad argument.
    """

    def __init__(self, *, page_size: int = DEFAULT_PAGE_SIZE, device: str = "cpu",
                 tensors_per_group: int = 2, on_page: PageHook | None = None) -> None:
        if not _is_int(page_size) or page_size <= 0:
            raise ConfigError(f"page_size={page_size!r}: must be a positive int of bytes, "
                              f"e.g. {DEFAULT_PAGE_SIZE}")
        if not _is_int(tensors_per_group) or tensors_per_group < 1:
            raise ConfigError(f"tensors_per_group={tensors_per_group!r}: must be an int >= 1, "
                              "e.g. 2 (K and V)")
        if device != CPU:
            import torch

            try:
                torch.device(device)
            except (RuntimeError, TypeError) as exc:
                raise ConfigError(f"device={device!r}: not a torch device; use 'cpu' or 'cuda:N'"
                                  ) from exc
        self.page_size = page_size
        self.device = device
        self.tensors_per_group = tensors_per_group
        self._on_page = on_page
        self._lock = threading.Lock()
        self._groups: dict[int, _Group] = {}
        self._pending: _Pending | None = None
        self._committed: set[str] = set()
        self._aborted: set[str] = set()
        self._torn_down = False

    def _check_live(self) -> None:
        if self._torn_down:
            raise AllocatorTornDown("allocator already torn down: no backend call may run "
                                    "after teardown (defer teardown until the listener stopped)")

    def _check_no_pending(self, what: str, phase: str | None = None) -> None:
        if self._pending is not None:
            raise StateConsistency(
                f"{what} refused: unmap transaction {self._pending.transaction_id!r} is "
                "pending; commit or abort it first", phase=phase)

    def _group(self, group_id: int) -> _Group:
        if not _is_int(group_id):
            raise BadRequest(f"group_id={group_id!r}: must be an int")
        group = self._groups.get(group_id)
        if group is None:
            raise BadRequest(f"group_id={group_id}: unknown group (known: "
                             f"{sorted(self._groups)}); call create_kv_tensors first")
        return group

    def _check_offsets(self, group: _Group, group_id: int,
                       offsets: Sequence[int]) -> list[int]:
        if isinstance(offsets, (str, bytes)) or not isinstance(offsets, Sequence):
            raise BadRequest(f"offsets={offsets!r}: must be a list of int byte offsets")
        seen: dict[int, None] = {}
        for off in offsets:
            if not _is_int(off):
                raise BadRequest(f"offset {off!r}: must be an int byte offset")
            if off < 0:
                raise BadRequest(f"offset {off}: negative; offsets are bytes from 0")
            if off % self.page_size:
                raise BadRequest(f"offset {off}: not a multiple of page_size {self.page_size}; "
                                 f"round down to {off - off % self.page_size}")
            if off >= group.capacity:
                raise BadRequest(f"offset {off}: beyond group {group_id}'s capacity "
                                 f"{group.capacity}; use an offset < capacity")
            seen[off] = None
        return list(seen)

    @staticmethod
    def _check_txn_id(transaction_id: str) -> None:
        if not isinstance(transaction_id, str) or not transaction_id:
            raise BadRequest(f"transaction_id={transaction_id!r}: must be a non-empty str")

    def create_kv_tensors(self, group_id: int, capacity: int) -> None:
        """Create group ``group_id`` with ``capacity`` bytes of address space, nothing mapped.

        Error handling:
            AllocatorTornDown after teardown; BadRequest for a negative/non-int group id
            or a capacity that is not a positive multiple of page_size;
            StateConsistency if the group already exists.
        """
        with self._lock:
            self._check_live()
            if not _is_int(group_id) or group_id < 0:
                raise BadRequest(f"group_id={group_id!r}: must be an int >= 0")
            if not _is_int(capacity) or capacity <= 0 or capacity % self.page_size:
                raise BadRequest(f"capacity={capacity!r}: must be a positive multiple of "
                                 f"page_size {self.page_size}")
            if group_id in self._groups:
                raise StateConsistency(f"group_id={group_id}: KV tensors already created; "
                                       "create each group once")
            self._groups[group_id] = _Group(capacity, [{} for _ in range(self.tensors_per_group)])

    def kv_tensors_created(self, group_id: int = 0) -> bool:
        """Returns: whether group ``group_id`` exists.

        Error handling:
            AllocatorTornDown after teardown; BadRequest for a non-int group id.
        """
        with self._lock:
            self._check_live()
            if not _is_int(group_id):
                raise BadRequest(f"group_id={group_id!r}: must be an int")
            return group_id in self._groups

    def map(self, group_id: int, offsets: Sequence[int]) -> list[int]:
        """Map every tensor of the group at each offset.

        Returns:
            The offsets newly mapped by this call, in request order; offsets already
            mapped (or repeated in the request) are skipped.

        Error handling:
            AllocatorTornDown; BadRequest for a bad group or offset (nothing mapped);
            StateConsistency while a transaction is pending or for a partially mapped
            offset; MapQuarantined for a quarantined offset; OperationFailed when an
            allocation fails: what this call mapped is rolled back, and any offset
            whose rollback failed is quarantined (and named in the message).
        """
        with self._lock:
            self._check_live()
            group = self._group(group_id)
            wanted = self._check_offsets(group, group_id, offsets)
            self._check_no_pending("map")
            bad = [off for off in wanted if off in group.quarantined]
            if bad:
                raise MapQuarantined(f"group {group_id} offsets {bad}: quarantined after a "
                                     "failed rollback; use other offsets or tear down")
            new: list[int] = []
            for off in wanted:
                held = sum(off in t for t in group.tensors)
                if held == self.tensors_per_group:
                    continue
                if held:
                    raise StateConsistency(
                        f"group {group_id} offset {off}: partially mapped ({held} of "
                        f"{self.tensors_per_group} tensors); unmap it first")
                new.append(off)
            touched: list[int] = []
            try:
                for off in new:
                    touched.append(off)
                    for tensors in group.tensors:
                        if self._on_page is not None:
                            self._on_page("map", group_id, off)
                        tensors[off] = self._block()
            except Exception as exc:
                lost = self._rollback(group, group_id, touched)
                extra = f"; rollback failed, quarantined {lost}" if lost else ""
                raise OperationFailed(f"map of group {group_id} offset {touched[-1]} "
                                      f"failed: {exc!r}; rolled back{extra}") from exc
            return new

    def _block(self) -> torch.Tensor | mmap.mmap:
        """One new block of ``page_size`` bytes on the allocator's device (the module docstring)."""
        if self.device == CPU:
            return mmap.mmap(-1, self.page_size)
        import torch  # loaded by __init__ already: a dictionary look-up

        return torch.empty(self.page_size, dtype=torch.uint8, device=self.device)

    def _rollback(self, group: _Group, group_id: int, touched: list[int]) -> list[int]:
        """Release this call's blocks; return the offsets whose release failed."""
        lost: list[int] = []
        for off in reversed(touched):
            try:
                for tensors in reversed(group.tensors):
                    if off in tensors:
                        if self._on_page is not None:
                            self._on_page("rollback", group_id, off)
                        del tensors[off]
            except Exception:  # any failed release quarantines the page
                group.quarantined.add(off)
                lost.append(off)
        return sorted(lost)

    @staticmethod
    def _release(group: _Group, offsets: Sequence[int]) -> None:
        for tensors in group.tensors:
            for off in offsets:
                tensors.pop(off, None)

    def unmap(self, group_id: int, offsets: Sequence[int]) -> None:
        """Release the pages at ``offsets``; offsets not mapped are skipped (idempotent).

        A quarantined offset has its blocks released but stays quarantined.

        Error handling:
            AllocatorTornDown; BadRequest for a bad group or offset (nothing released);
            StateConsistency while a transaction is pending.
        """
        with self._lock:
            self._check_live()
            group = self._group(group_id)
            wanted = self._check_offsets(group, group_id, offsets)
            self._check_no_pending("unmap")
            self._release(group, wanted)

    def prepare_unmap(self, group_id: int, offsets: Sequence[int],
                      transaction_id: str) -> None:
        """Record a pending unmap; the pages stay mapped until :meth:`commit_unmap`.

        Error handling:
            AllocatorTornDown; BadRequest for a bad id, group or offset;
            StateConsistency (phase "prepare") while another transaction is pending or
            when the id was already used (committed, aborted, or aborted before it
            was ever prepared).
        """
        with self._lock:
            self._check_live()
            self._check_txn_id(transaction_id)
            group = self._group(group_id)
            wanted = self._check_offsets(group, group_id, offsets)
            self._check_no_pending(f"prepare of {transaction_id!r}", phase="prepare")
            if transaction_id in self._committed or transaction_id in self._aborted:
                state = "committed" if transaction_id in self._committed else "aborted"
                raise StateConsistency(f"transaction {transaction_id!r} was already {state}; "
                                       "use a fresh transaction id", phase="prepare")
            self._pending = _Pending(transaction_id, group_id, tuple(wanted))

    def commit_unmap(self, transaction_id: str) -> None:
        """Release the pages of the pending transaction; idempotent for a committed id.

        Error handling:
            AllocatorTornDown; BadRequest for a bad id; StateConsistency (phase
            "commit") for an id that is not pending and was never committed
            (unknown or aborted).
        """
        with self._lock:
            self._check_live()
            self._check_txn_id(transaction_id)
            if transaction_id in self._committed:
                return
            pending = self._pending
            if pending is None or pending.transaction_id != transaction_id:
                state = "aborted" if transaction_id in self._aborted else "unknown"
                raise StateConsistency(f"commit of {transaction_id!r} refused: transaction "
                                       f"is {state}; prepare it first", phase="commit")
            self._committed.add(transaction_id)
            self._release(self._groups[pending.group_id], pending.offsets)
            self._pending = None

    def abort_unmap(self, transaction_id: str) -> None:
        """Abort a transaction: the pages stay mapped. Idempotent.

        An unknown id is remembered as aborted, so a later prepare with it is refused.

        Error handling:
            AllocatorTornDown; BadRequest for a bad id; StateConsistency (phase
            "commit") when the transaction was already committed.
        """
        with self._lock:
            self._check_live()
            self._check_txn_id(transaction_id)
            if transaction_id in self._committed:
                raise StateConsistency(f"abort of {transaction_id!r} refused: already "
                                       "committed, its pages are released", phase="commit")
            if self._pending is not None and self._pending.transaction_id == transaction_id:
                self._pending = None
            self._aborted.add(transaction_id)

    def mapped_offsets(self, group_id: int = 0) -> frozenset[int]:
        """Returns: the offsets mapped in every tensor of the group.

        Error handling:
            AllocatorTornDown; BadRequest for an unknown group.
        """
        with self._lock:
            self._check_live()
            group = self._group(group_id)
            first, *rest = group.tensors
            return frozenset(off for off in first if all(off in t for t in rest))

    def quarantined_offsets(self, group_id: int = 0) -> frozenset[int]:
        """Returns: the group's quarantined offsets. Raises as :meth:`mapped_offsets`."""
        with self._lock:
            self._check_live()
            return frozenset(self._group(group_id).quarantined)

    def pending_transaction(self) -> str | None:
        """Returns: the id of the pending unmap transaction, or None. Raises AllocatorTornDown."""
        with self._lock:
            self._check_live()
            return self._pending.transaction_id if self._pending else None

    def used_bytes(self) -> int:
        """Returns: bytes of page blocks held over all groups and tensors.

        For fully mapped pages this is page_size * pages * tensors_per_group; blocks a
        failed rollback left behind are counted too.

        Error handling:
            AllocatorTornDown after teardown.
        """
        with self._lock:
            self._check_live()
            blocks = sum(len(t) for g in self._groups.values() for t in g.tensors)
            return blocks * self.page_size

    def teardown(self) -> None:
        """Release every block and forget all state; idempotent.

        Returns:
            None.

        Error handling:
            Never raises.
        """
        with self._lock:
            self._torn_down = True
            for group in self._groups.values():
                for tensors in group.tensors:
                    tensors.clear()
            self._groups.clear()
            self._pending = None

    @property
    def torn_down(self) -> bool:
        """Whether :meth:`teardown` has run."""
        return self._torn_down
