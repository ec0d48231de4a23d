"""mutation/stop-path.txt, equivalent.yaml and moved.txt hold to the code they name.

Every function the stop-path list names exists; every entry of equivalent.yaml names a mutant of those
functions and the source line it points at (an entry whose code has moved fails here instead of naming
another mutant); every equivalent mutant's reason is checkable: the test named exists; every function
moved.txt names is gone from where a record names it and mutated where it is now.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest
from lc_helpers import ROOT

from harness.errors import ConfigError
from harness.mutate.mutator import functions_of
from harness.mutate.plan import (
    EQUIVALENT,
    MOVED,
    SURVIVORS,
    read_entries,
    read_moved,
    read_stop_path,
    source_line,
    subjects_of,
    with_recorded_ids,
)
from harness.mutate.run import cast_of_file


@functools.cache
def _mutant_ids() -> frozenset[str]:
    """The mutants of every scope's stop-path list (the reference's, the engine stand-in's)."""
    from harness.mutate.scopes import SCOPES

    return frozenset(m.id for scope in SCOPES for s in subjects_of(read_stop_path(scope.stop_path), scope.stop_path)
                     for m in s.mutants())


def test_the_stop_path_names_existing_functions_of_the_five_files() -> None:
    subjects = subjects_of(read_stop_path())
    assert {s.rel for s in subjects} == {f"harness/reference/{f}.py" for f in ("listener", "serving", "registry",
                                                                               "worker", "handshake")}
    names = {f"{s.module}:{q}" for s in subjects for q in s.qualnames or ()}
    for must in ("harness.reference.listener:WorkerListener.stop", "harness.reference.listener:WorkerListener.start",
                 "harness.reference.serving:ServingLoop._dispatch_ready", "harness.reference.registry:Registry."
                 "exit_hook", "harness.reference.worker:ReferenceWorker.shutdown",
                 "harness.reference.handshake:HandshakeListener.shutdown"):
        assert must in names
    assert len(_mutant_ids()) >= 60


def test_a_mutant_of_the_request_path_runs_the_worker_listeners_scenarios() -> None:
    """The worker listener is two files; each mutant of either runs the scenarios of that listener."""
    casts = {s.rel: cast_of_file(s.rel) for s in subjects_of(read_stop_path())}
    assert casts == {"harness/reference/listener.py": "worker", "harness/reference/serving.py": "worker",
                     "harness/reference/registry.py": "worker", "harness/reference/worker.py": "worker",
                     "harness/reference/handshake.py": "handshake"}


def test_a_stop_path_line_naming_no_function_is_a_located_error(tmp_path: Path) -> None:
    bad = tmp_path / "stop-path.txt"
    bad.write_text("# comment\nharness.reference.registry:Registry.stop_all\nharness.reference.registry:Nope\n")
    with pytest.raises(ConfigError, match=rf"^{bad}:2: .*no function Nope in harness.reference.registry"):
        subjects_of(read_stop_path(bad), bad)
    bad.write_text("harness.reference.registry\n")
    with pytest.raises(ConfigError, match=rf"^{bad}:1: 'harness.reference.registry': give MODULE:QUALNAME"):
        read_stop_path(bad)


def test_each_equivalent_entry_names_a_mutant_and_its_line() -> None:
    """(survivors.yaml explains the recorded measurement: tests/test_mutate_docs.py holds it to that.)"""
    entries = read_entries(EQUIVALENT, equivalent=True)
    ids = _mutant_ids()
    for key, entry in entries.items():
        assert key in ids, f"{entry.where}: {key} names no mutant of a stop-path list in mutation/"
        assert source_line(ROOT, key) == entry.line.strip(), f"{entry.where}: {key} no longer points at its line"
        assert entry.why.strip(), f"{entry.where}: say why"


def test_each_equivalent_mutant_names_the_test_that_shows_it() -> None:
    for key, entry in read_entries(EQUIVALENT, equivalent=True).items():
        file, _, name = entry.test.partition("::")
        assert (ROOT / file).is_file() and name, f"{entry.where}: {key}: test {entry.test!r} (give path::name)"
        defs = {n.name for n in ast.walk(ast.parse((ROOT / file).read_text())) if isinstance(n, ast.FunctionDef)}
        assert name.split("[")[0] in defs, f"{entry.where}: {key}: no test {name} in {file}"
    assert not set(read_entries(EQUIVALENT, equivalent=True)) & set(read_entries(SURVIVORS, equivalent=False))


def test_a_malformed_entry_is_refused_with_its_place(tmp_path: Path) -> None:
    f = tmp_path / "equivalent.yaml"
    f.write_text("- {id: a, line: b, why: c, reason: maybe, test: t}\n")
    with pytest.raises(ConfigError, match=rf"^{f}: entry 1: reason 'maybe': one of unreachable, same_behaviour"):
        read_entries(f, equivalent=True)
    f.write_text("- {id: a, line: b}\n")
    with pytest.raises(ConfigError, match=rf"^{f}: entry 1: give exactly the string keys id, line, why"):
        read_entries(f, equivalent=False)


def test_each_moved_function_is_gone_from_where_a_record_names_it_and_mutated_where_it_is() -> None:
    moved = read_moved()
    ids = _mutant_ids()
    for then, now in moved.items():
        file, _, qualname = then.partition("::")
        assert not (ROOT / file).is_file() or qualname not in functions_of(ast.parse((ROOT / file).read_text())), (
            f"{MOVED}: {then} is still there")
        assert any(i.startswith(now + "::") for i in ids), f"{MOVED}: {now} names no function of a stop-path list"
    assert len(set(moved.values())) == len(moved)


def test_an_entry_is_found_under_the_id_a_record_gives_its_moved_function(tmp_path: Path) -> None:
    moved = {"a.py::A.f": "b.py::B.f"}
    got = with_recorded_ids({"b.py::B.f::remove:123abc": 1, "b.py::B.g::remove:123abc": 2, "a.py::A.h::negate:0": 3},
                            moved)
    assert got == {"b.py::B.f::remove:123abc": 1, "a.py::A.f::remove:123abc": 1, "b.py::B.g::remove:123abc": 2,
                   "a.py::A.h::negate:0": 3}
    assert with_recorded_ids({"a.py::A.f::remove:1": "kept", "b.py::B.f::remove:1": "new"}, moved)[
        "a.py::A.f::remove:1"] == "kept"  # an entry under the recorded id itself wins
    f = tmp_path / "moved.txt"
    f.write_text("# comment\na.py::A.f   b.py::B.f  # trailing\n\n")
    assert read_moved(f) == moved and read_moved(tmp_path / "none.txt") == {}
    for bad in ("a.py::A.f\n", "a.py::A.f b.py\n", "a.py::A.f b.py::B.f\na.py::A.f c.py::C.f\n"):
        f.write_text(bad)
        with pytest.raises(ConfigError, match=rf"^{f}:\d: .*give FILE::QUALNAME as recorded, then as it is now"):
            read_moved(f)
