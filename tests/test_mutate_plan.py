"""mutation/stop-path.txt and equivalent.yaml hold to the code they name.

Every function the stop-path list names exists; every entry of equivalent.yaml names a mutant of those
functions and the source line it points at (an entry whose code has moved fails here instead of naming
another mutant); every equivalent mutant's reason is checkable: the test named exists.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.mutate.plan import EQUIVALENT, SURVIVORS, read_entries, read_stop_path, source_line, subjects_of

ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def _mutant_ids() -> frozenset[str]:
    """The mutants of every scope's stop-path list (the reference's, the engine stand-in's)."""
    from harness.mutate.scopes import SCOPES

    return frozenset(m.id for scope in SCOPES for s in subjects_of(read_stop_path(scope.stop_path), scope.stop_path)
                     for m in s.mutants())


def test_the_stop_path_names_existing_functions_of_the_four_files() -> None:
    subjects = subjects_of(read_stop_path())
    assert {s.rel for s in subjects} == {f"harness/reference/{f}.py" for f in ("listener", "registry", "worker",
                                                                               "handshake")}
    names = {f"{s.module}:{q}" for s in subjects for q in s.qualnames or ()}
    for must in ("harness.reference.listener:WorkerListener.stop", "harness.reference.listener:WorkerListener.start",
                 "harness.reference.listener:WorkerListener._dispatch_ready", "harness.reference.registry:Registry."
                 "exit_hook", "harness.reference.worker:ReferenceWorker.shutdown",
                 "harness.reference.handshake:HandshakeListener.shutdown"):
        assert must in names
    assert len(_mutant_ids()) >= 60


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
