"""The tests mutation/equivalent.yaml names for mutants of harness/reference/registry.py: each shows that what
anyone can observe of the mutant is what they observe of the reference.

``registry.py::Registry.__len__::unlock:50e45c`` (``Registry.__len__`` without ``with self._lock:``): the lock makes a
reader wait
while another thread is inside a critical section of the registry; the count it then returns is one the
unlocked read can return too, because every critical section changes ``_entries`` by at most one dict
operation (an insert or a delete: no intermediate size exists to be seen) and the read itself is one
``len()`` of a dict.  The test checks that premise on the source and then the two reads side by side at each
point of a start's and a forget's critical section, with a reader held at the lock.

``registry.py::Registry.get::unlock:50e45c`` (``Registry.get`` without ``with self._lock:``): the same premise, the
read being
one ``dict.get`` of one key, shown the same way.
"""

from __future__ import annotations

import ast
import threading
import types
from pathlib import Path
from typing import Any

from harness.mutate.mutator import apply, mutants_of

REGISTRY_PY = Path(__file__).resolve().parent.parent / "harness" / "reference" / "registry.py"
LEN_UNLOCK = "harness/reference/registry.py::Registry.__len__::unlock:50e45c"
GET_UNLOCK = "harness/reference/registry.py::Registry.get::unlock:50e45c"
SAFETY = 10.0  # seconds: a safety net on every wait, never a timer
_CHANGES = ("clear", "pop", "popitem", "update", "setdefault", "__setitem__", "__delitem__")


def _mutated(mid: str) -> Any:
    """The registry module with mutant ``mid`` applied (a module of its own: the reference is untouched)."""
    src = REGISTRY_PY.read_text()
    m = next(m for m in mutants_of(src, "harness/reference/registry.py") if m.id == mid)
    mod = types.ModuleType(f"registry_mutant_{m.line}")
    exec(compile(apply(src, m), str(REGISTRY_PY), "exec"), mod.__dict__)
    return mod


def _changes_of_entries(node: ast.AST) -> int:
    """How many operations in ``node`` change ``self._entries`` (a subscript store or delete, a mutating call)."""
    n = 0
    for sub in ast.walk(node):
        if isinstance(sub, ast.Subscript) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            n += ast.unparse(sub.value) == "self._entries"
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in _CHANGES:
            n += ast.unparse(sub.func.value) == "self._entries"
    return n


def _premise(method: str, body: str) -> None:
    """Every critical section changes ``_entries`` by at most one operation, none changes it outside the lock,
    and ``method`` is ``body``: one read of the dict under the lock."""
    tree = ast.parse(REGISTRY_PY.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Registry")
    locked = [w for w in ast.walk(cls) if isinstance(w, ast.With)
              and ast.unparse(w.items[0].context_expr) == "self._lock"]
    assert locked and all(_changes_of_entries(w) <= 1 for w in locked), "a critical section changes _entries twice"
    outside = _changes_of_entries(cls) - sum(_changes_of_entries(w) for w in locked)
    assert outside == 0, "_entries is changed outside the lock"
    fn = next(f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == method)
    assert ast.unparse(fn.body[-1]) == body, ast.unparse(fn.body[-1])


def _side_by_side(mid: str, read: Any) -> None:
    """``read(registry)`` on the reference and on mutant ``mid``, before, during (a start's insert or a forget's
    delete done, its lock still held) and after each critical section: the same values."""
    mutant = _mutated(mid).Registry(exit_hook=False)
    from harness.reference.registry import Registry

    reference: Any = Registry(exit_hook=False)
    for reg in (reference, mutant):  # one key in, then a start's insert and a forget's delete under the lock
        reg._entries[("a", 0, 0)] = object()
    for change in ("insert", "delete"):
        seen: dict[str, list[Any]] = {}
        for name, reg in (("reference", reference), ("mutant", mutant)):
            inside, done = threading.Event(), threading.Event()
            values: list[Any] = [read(reg)]  # before the critical section

            def section(reg: Any = reg, inside: threading.Event = inside, done: threading.Event = done,
                        change: str = change) -> None:
                with reg._lock:
                    if change == "insert":
                        reg._entries[("b", 0, 0)] = object()
                    else:
                        del reg._entries[("b", 0, 0)]
                    inside.set()
                    done.wait(SAFETY)  # (the start's atexit.register / the forget's event): the lock still held

            t = threading.Thread(target=section)
            t.start()
            assert inside.wait(SAFETY)
            reader = threading.Thread(target=lambda reg=reg, values=values: values.append(read(reg)))
            reader.start()
            if name == "mutant":  # its read does not wait for the lock: it is done while the section holds it
                reader.join(SAFETY)
                assert not reader.is_alive() and t.is_alive()
            done.set()  # (the reference's read waits for the lock, then reads)
            t.join(SAFETY)
            reader.join(SAFETY)
            values.append(read(reg))  # after it
            seen[name] = values
        assert seen["reference"] == seen["mutant"], (change, seen)


def test_registry_len_without_its_lock_returns_what_the_locked_one_can() -> None:
    _premise("__len__", "with self._lock:\n    return len(self._entries)")
    _side_by_side(LEN_UNLOCK, len)


def test_registry_get_without_its_lock_returns_what_the_locked_one_can() -> None:
    """``registry.py::Registry.get::unlock:50e45c`` (``Registry.get`` without its lock): the same premise as
    ``__len__``'s, the
    read being one ``dict.get``: it returns the listener registered on the key before or after the one change a
    section makes, as the locked read can."""
    _premise("get", "with self._lock:\n    return self._entries.get(key)")
    _side_by_side(GET_UNLOCK, lambda reg: reg.get(("b", 0, 0)) is not None)
