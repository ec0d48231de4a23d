"""Unit and model-based tests of the reference KV allocator."""

from __future__ import annotations

import mmap
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from harness.errors import (
    AllocatorTornDown,
    BackendError,
    BadRequest,
    ConfigError,
    MapQuarantined,
    OperationFailed,
    StateConsistency,
)
from harness.reference.allocator import DEFAULT_PAGE_SIZE, KVAllocator, MiB

P = 4096


@dataclass
class Hook:
    """Fails the fail_at-th map allocation (0-based) and, if asked, every rollback release."""

    fail_at: int | None = None
    rollback_fails: bool = False
    calls: list[tuple[str, int, int]] = field(default_factory=list)
    maps: int = 0

    def __call__(self, op: str, group_id: int, offset: int) -> None:
        self.calls.append((op, group_id, offset))
        if op == "map":
            self.maps += 1
            if self.maps - 1 == self.fail_at:
                raise RuntimeError("CUDA out of memory (injected)")
        elif op == "rollback" and self.rollback_fails:
            raise RuntimeError("release failed (injected)")


def make(pages: int = 8, hook: Hook | None = None, tensors: int = 2) -> KVAllocator:
    alloc = KVAllocator(page_size=P, tensors_per_group=tensors, on_page=hook)
    alloc.create_kv_tensors(0, pages * P)
    return alloc


def test_defaults() -> None:
    alloc = KVAllocator()
    assert (alloc.page_size, alloc.device, alloc.tensors_per_group) == (2 * MiB, "cpu", 2)
    assert 2 * MiB == DEFAULT_PAGE_SIZE and not alloc.kv_tensors_created()


@pytest.mark.parametrize("kwargs", [
    {"page_size": 0}, {"page_size": -4096}, {"page_size": 1.5}, {"page_size": True},
    {"tensors_per_group": 0}, {"device": "nonsense"},
])
def test_constructor_rejects(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError) as info:
        KVAllocator(**kwargs)  # type: ignore[arg-type]
    assert repr(next(iter(kwargs.values()))) in str(info.value)


@pytest.mark.parametrize(("gid", "cap"), [(-1, P), (0, 0), (0, P + 1), (0, -P), ("0", P)])
def test_create_rejects(gid: object, cap: object) -> None:
    alloc = KVAllocator(page_size=P)
    with pytest.raises(BadRequest):
        alloc.create_kv_tensors(gid, cap)  # type: ignore[arg-type]


def test_create_twice_is_state_consistency() -> None:
    alloc = make()
    assert alloc.kv_tensors_created(0) and not alloc.kv_tensors_created(1)
    with pytest.raises(StateConsistency, match="already created"):
        alloc.create_kv_tensors(0, P)


def test_map_holds_real_memory() -> None:
    alloc = make(tensors=2)
    assert alloc.map(0, [2 * P, 0, 2 * P]) == [2 * P, 0]
    assert alloc.mapped_offsets(0) == {0, 2 * P}
    assert alloc.used_bytes() == 2 * 2 * P
    group = alloc._groups[0]
    for tensors in group.tensors:
        for block in tensors.values():  # on the CPU: an anonymous memory map of the page, torch not needed
            assert isinstance(block, mmap.mmap) and len(block) == P
            block[P - 1] = 7  # writable memory of its own
    assert group.tensors[0][0][P - 1] == 7 and group.tensors[0][0] is not group.tensors[1][0]
    assert alloc.map(0, [0, P]) == [P]


def test_map_off_the_cpu_makes_torch_tensors_on_that_device() -> None:
    """Any other device's pages are torch tensors there ("meta": torch's device without memory, so this runs on a
    machine without CUDA, through the same call a CUDA page takes)."""
    import torch

    alloc = KVAllocator(page_size=P, device="meta")
    alloc.create_kv_tensors(0, 4 * P)
    assert alloc.map(0, [0, P]) == [0, P]
    for tensors in alloc._groups[0].tensors:
        for block in tensors.values():
            assert isinstance(block, torch.Tensor) and block.device == torch.device("meta")
            assert block.dtype == torch.uint8 and block.numel() == P
    assert alloc.used_bytes() == 2 * 2 * P


@pytest.mark.parametrize(("offsets", "needle"), [
    ([P + 1], "multiple of page_size"), ([-P], "negative"), ([8 * P], "capacity"),
    (["0"], "int"), ([True], "int"),
])
def test_map_rejects_bad_offsets(offsets: list[object], needle: str) -> None:
    alloc = make()
    with pytest.raises(BadRequest, match=needle):
        alloc.map(0, [0, *offsets])  # type: ignore[list-item]
    assert alloc.mapped_offsets(0) == frozenset()


def test_unknown_group_is_bad_request() -> None:
    alloc = make()
    for call in (lambda: alloc.map(3, [0]), lambda: alloc.unmap(3, [0]),
                 lambda: alloc.prepare_unmap(3, [0], "t"), lambda: alloc.mapped_offsets(3)):
        with pytest.raises(BadRequest, match="group_id=3"):
            call()


def test_map_partially_mapped_is_state_consistency() -> None:
    alloc = make()
    alloc._groups[0].tensors[0][P] = mmap.mmap(-1, P)
    with pytest.raises(StateConsistency, match="partially mapped"):
        alloc.map(0, [0, P])
    assert alloc.mapped_offsets(0) == frozenset()


def test_map_failure_rolls_back_this_call_only() -> None:
    hook = Hook()
    alloc = make(hook=hook)
    alloc.map(0, [0])
    hook.fail_at = hook.maps + 3  # second tensor of the second new page
    with pytest.raises(OperationFailed, match="rolled back") as info:
        alloc.map(0, [0, P, 2 * P, 3 * P])
    assert isinstance(info.value.__cause__, RuntimeError)
    assert alloc.mapped_offsets(0) == {0} and alloc.used_bytes() == 2 * P
    assert alloc.quarantined_offsets(0) == frozenset()
    assert [c for c in hook.calls if c[0] == "rollback"] == [
        ("rollback", 0, 2 * P), ("rollback", 0, P), ("rollback", 0, P)]
    hook.fail_at = None
    assert alloc.map(0, [P, 2 * P]) == [P, 2 * P]


def test_failed_rollback_quarantines() -> None:
    hook = Hook(fail_at=3, rollback_fails=True)
    alloc = make(hook=hook)
    with pytest.raises(OperationFailed, match=r"quarantined \[0, 4096\]"):
        alloc.map(0, [0, P, 2 * P])
    assert alloc.quarantined_offsets(0) == {0, P}
    assert alloc.mapped_offsets(0) == {0}  # page 0 was whole; P holds one of two blocks
    assert alloc.used_bytes() == 3 * P
    hook.fail_at, hook.rollback_fails = None, False
    for off in (0, P):
        with pytest.raises(MapQuarantined, match="quarantined"):
            alloc.map(0, [2 * P, off])
    assert alloc.mapped_offsets(0) == {0}
    alloc.unmap(0, [0, P])  # releases the blocks, the quarantine stays
    assert alloc.used_bytes() == 0
    with pytest.raises(MapQuarantined):
        alloc.map(0, [P])
    assert alloc.map(0, [2 * P]) == [2 * P]


def test_unmap_is_idempotent() -> None:
    alloc = make()
    alloc.map(0, [0, P])
    for _ in range(2):
        alloc.unmap(0, [P, 3 * P])
    assert alloc.mapped_offsets(0) == {0} and alloc.used_bytes() == 2 * P
    with pytest.raises(BadRequest):
        alloc.unmap(0, [1])


def test_prepare_commit() -> None:
    alloc = make()
    alloc.map(0, [0, P, 2 * P])
    alloc.prepare_unmap(0, [0, P, 5 * P], "t1")
    assert alloc.pending_transaction() == "t1"
    assert alloc.mapped_offsets(0) == {0, P, 2 * P}
    for _ in range(2):  # the second commit is an idempotent no-op
        alloc.commit_unmap("t1")
        assert alloc.pending_transaction() is None
        assert alloc.mapped_offsets(0) == {2 * P}


def test_pending_blocks_map_unmap_prepare() -> None:
    alloc = make()
    alloc.map(0, [0])
    alloc.prepare_unmap(0, [0], "t1")
    for call, phase in ((lambda: alloc.map(0, [P]), None), (lambda: alloc.unmap(0, [0]), None),
                        (lambda: alloc.prepare_unmap(0, [0], "t2"), "prepare")):
        with pytest.raises(StateConsistency, match="'t1' is pending") as info:
            call()
        assert info.value.phase == phase


def test_abort_restores() -> None:
    alloc = make()
    alloc.map(0, [0])
    alloc.prepare_unmap(0, [0], "t1")
    alloc.abort_unmap("t1")
    alloc.abort_unmap("t1")  # idempotent
    assert alloc.pending_transaction() is None and alloc.mapped_offsets(0) == {0}
    with pytest.raises(StateConsistency, match="aborted") as info:
        alloc.commit_unmap("t1")
    assert info.value.phase == "commit"
    with pytest.raises(StateConsistency, match="fresh transaction id"):
        alloc.prepare_unmap(0, [0], "t1")


def test_abort_of_unknown_then_late_prepare_fails() -> None:
    alloc = make()
    alloc.map(0, [0])
    alloc.abort_unmap("late")
    with pytest.raises(StateConsistency, match="already aborted") as info:
        alloc.prepare_unmap(0, [0], "late")
    assert info.value.phase == "prepare"
    assert alloc.pending_transaction() is None and alloc.mapped_offsets(0) == {0}


def test_abort_after_commit_refused() -> None:
    alloc = make()
    alloc.map(0, [0])
    alloc.prepare_unmap(0, [0], "t1")
    alloc.commit_unmap("t1")
    with pytest.raises(StateConsistency, match="already committed") as info:
        alloc.abort_unmap("t1")
    assert info.value.phase == "commit"
    with pytest.raises(StateConsistency):
        alloc.prepare_unmap(0, [0], "t1")


def test_commit_unknown_refused() -> None:
    alloc = make()
    with pytest.raises(StateConsistency, match="unknown") as info:
        alloc.commit_unmap("nope")
    assert info.value.phase == "commit"
    for bad in ("", 3):
        with pytest.raises(BadRequest):
            alloc.commit_unmap(bad)  # type: ignore[arg-type]


def test_teardown_frees_and_refuses_everything() -> None:
    alloc = make()
    alloc.map(0, [0, P])
    alloc.prepare_unmap(0, [0], "t1")
    blocks = list(alloc._groups[0].tensors[0].values())
    alloc.teardown()
    alloc.teardown()  # idempotent
    assert alloc.torn_down and alloc._groups == {} and blocks  # all references dropped
    calls: list[Callable[[], object]] = [
             lambda: alloc.create_kv_tensors(1, P), lambda: alloc.kv_tensors_created(),
             lambda: alloc.map(0, [0]), lambda: alloc.unmap(0, [0]),
             lambda: alloc.prepare_unmap(0, [0], "t2"), lambda: alloc.commit_unmap("t1"),
             lambda: alloc.abort_unmap("t1"), lambda: alloc.mapped_offsets(),
             lambda: alloc.pending_transaction(), lambda: alloc.used_bytes()]
    for call in calls:
        with pytest.raises(AllocatorTornDown, match="torn down"):
            call()


GROUPS = [0, 1, 2]
IDS = ["a", "b", "c", "d"]
gid_st = st.sampled_from([0, 0, 0, 1, 2])  # mostly the group created at the start
offset_st = st.sampled_from([0, P, 2 * P, 3 * P] * 3 + [4 * P, -P, P // 2])  # some invalid
offsets_st = st.lists(offset_st, max_size=3)


class AllocatorMachine(RuleBasedStateMachine):
    """A pure-Python model (block counts per page) against the real KVAllocator."""
    T = 2

    def __init__(self) -> None:
        super().__init__()
        self.hook = Hook()
        self.real = KVAllocator(page_size=P, tensors_per_group=self.T, on_page=self.hook)
        self.caps: dict[int, int] = {}
        self.blocks: dict[int, dict[int, int]] = {}
        self.quarantined: dict[int, set[int]] = {}
        self.pending: tuple[str, int, list[int]] | None = None
        self.committed, self.aborted = set[str](), set[str]()

    def check(self, expected: type[BackendError] | None, call: Callable[[], object]) -> object:
        try:
            result = call()
        except BackendError as exc:
            assert type(exc) is expected, f"raised {exc!r}, model predicted {expected}"
            return None
        assert expected is None, f"succeeded, model predicted {expected}"
        return result

    def validate(self, gid: int, offsets: list[int]) -> type[BackendError] | None:
        cap = self.caps.get(gid, 0)
        return BadRequest if any(o < 0 or o % P or o >= cap for o in offsets) or not cap else None

    def mapped(self, gid: int) -> set[int]:
        return {o for o, n in self.blocks[gid].items() if n == self.T}

    @initialize()
    def create_group_0(self) -> None:
        self.create(0, 4)

    @rule(gid=st.sampled_from(GROUPS), pages=st.integers(1, 4))
    def create(self, gid: int, pages: int) -> None:
        expected = StateConsistency if gid in self.caps else None
        self.check(expected, lambda: self.real.create_kv_tensors(gid, pages * P))
        if expected is None:
            self.caps[gid] = pages * P
            self.blocks[gid] = {}
            self.quarantined[gid] = set()

    @rule(gid=gid_st, offsets=offsets_st,
          fail_at=st.none() | st.integers(0, 7), rollback_fails=st.booleans())
    def map(self, gid: int, offsets: list[int], fail_at: int | None,
            rollback_fails: bool) -> None:
        expected = self.validate(gid, offsets)
        if expected is None and self.pending is not None:
            expected = StateConsistency
        if expected is None and any(o in self.quarantined[gid] for o in offsets):
            expected = MapQuarantined
        new: list[int] = []
        if expected is None:
            new = [o for o in dict.fromkeys(offsets) if self.blocks[gid].get(o, 0) != self.T]
            if fail_at is not None and fail_at < len(new) * self.T:
                expected = OperationFailed
        self.hook.maps, self.hook.fail_at, self.hook.rollback_fails = 0, fail_at, rollback_fails
        event(f"map: {expected.__name__ if expected else 'ok'}"
              f"{' (rollback fails)' if expected is OperationFailed and rollback_fails else ''}")
        result = self.check(expected, lambda: self.real.map(gid, offsets))
        self.hook.fail_at, self.hook.rollback_fails = None, False
        if expected is None:
            assert result == new
            for o in new:
                self.blocks[gid][o] = self.T
        elif expected is OperationFailed and rollback_fails:
            assert fail_at is not None
            whole, part = divmod(fail_at, self.T)
            for o in new[:whole]:
                self.blocks[gid][o] = self.T
                self.quarantined[gid].add(o)
            if part:
                self.blocks[gid][new[whole]] = part
                self.quarantined[gid].add(new[whole])

    @rule(gid=gid_st, offsets=offsets_st)
    def unmap(self, gid: int, offsets: list[int]) -> None:
        expected = self.validate(gid, offsets)
        if expected is None and self.pending is not None:
            expected = StateConsistency
        self.check(expected, lambda: self.real.unmap(gid, offsets))
        if expected is None:
            for o in offsets:
                self.blocks[gid].pop(o, None)

    @rule(gid=gid_st, offsets=offsets_st, txn=st.sampled_from(IDS))
    def prepare(self, gid: int, offsets: list[int], txn: str) -> None:
        expected = self.validate(gid, offsets)
        if expected is None and (self.pending is not None
                                 or txn in self.committed or txn in self.aborted):
            expected = StateConsistency
        self.check(expected, lambda: self.real.prepare_unmap(gid, offsets, txn))
        if expected is None:
            self.pending = (txn, gid, offsets)

    @rule(txn=st.sampled_from(IDS))
    def commit(self, txn: str) -> None:
        ok = txn in self.committed or (self.pending is not None and self.pending[0] == txn)
        self.check(None if ok else StateConsistency, lambda: self.real.commit_unmap(txn))
        if ok and self.pending is not None and self.pending[0] == txn:
            _, gid, offsets = self.pending
            for o in offsets:
                self.blocks[gid].pop(o, None)
            self.committed.add(txn)
            self.pending = None

    @rule(txn=st.sampled_from(IDS))
    def abort(self, txn: str) -> None:
        expected = StateConsistency if txn in self.committed else None
        self.check(expected, lambda: self.real.abort_unmap(txn))
        if expected is None:
            self.aborted.add(txn)
            if self.pending is not None and self.pending[0] == txn:
                self.pending = None

    @invariant()
    def matches_model(self) -> None:
        assert self.real.pending_transaction() == (self.pending[0] if self.pending else None)
        for gid in GROUPS:
            assert self.real.kv_tensors_created(gid) == (gid in self.caps)
            if gid in self.caps:
                assert self.real.mapped_offsets(gid) == self.mapped(gid)
                assert self.real.quarantined_offsets(gid) == self.quarantined[gid]
        held = sum(n for pages in self.blocks.values() for n in pages.values())
        assert self.real.used_bytes() == held * P

    def teardown(self) -> None:
        self.real.teardown()


AllocatorMachine.TestCase.settings = settings(max_examples=100, deadline=None,
                                              stateful_step_count=30)
TestAllocatorModel = AllocatorMachine.TestCase
