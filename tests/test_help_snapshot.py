"""What ``lastcall --help`` and every command's ``--help`` print equals the committed copy under fixtures/help/
(one file per command, written by ``python -m harness.clidocs --help-fixtures``), so that a changed help text is
seen in review; every command the parser has has its file, and no file is left over from a command gone."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from harness import cli, clidocs

REGENERATE = ".venv/bin/python -m harness.clidocs --help-fixtures"
PATHS = clidocs.command_paths()


def stale(path: list[str], folder: Path = clidocs.HELP_DIR) -> str | None:
    """Why the committed --help text of ``lastcall PATH...`` is not what it prints now, or None."""
    name = clidocs.help_file(path)
    committed = (folder / name).read_text() if (folder / name).is_file() else None
    if committed == clidocs.help_output(path):
        return None
    return f"fixtures/help/{name} is stale: regenerate fixtures/help/ with: {REGENERATE}"


def unmatched(folder: Path, paths: list[list[str]]) -> list[str]:
    """A line for each command without its file in ``folder`` and for each file no command has."""
    want = {clidocs.help_file(p): " ".join(["lastcall", *p]) for p in paths}
    have = {f.name for f in folder.glob("*")}
    return ([f"{command} has no fixtures/help/{name}" for name, command in want.items() if name not in have]
            + [f"fixtures/help/{name} is no command's --help" for name in sorted(have - set(want))]
            + ([f"regenerate fixtures/help/ with: {REGENERATE}"] if set(want) != have else []))


@pytest.mark.parametrize("path", PATHS, ids=[clidocs.help_file(p) for p in PATHS])
def test_each_committed_help_text_is_current(path: list[str]) -> None:
    why = stale(path)
    assert why is None, why


def test_every_command_has_its_help_file_and_every_file_a_command() -> None:
    assert PATHS[0] == [] and ["ctl", "list"] in PATHS and ["prune-reports"] in PATHS
    problems = unmatched(clidocs.HELP_DIR, PATHS)
    assert not problems, "\n".join(problems)


def test_a_changed_help_string_makes_its_file_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    build = cli.build_parser

    def planted() -> argparse.ArgumentParser:
        parser = build()
        run = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["run"]
        next(a for a in run._actions if a.dest == "exitfirst").help = "a help string changed in the code"
        return parser

    monkeypatch.setattr(cli, "build_parser", planted)
    assert stale(["run"]) == f"fixtures/help/run.txt is stale: regenerate fixtures/help/ with: {REGENERATE}"
    assert stale(["list"]) is None


def test_a_missing_or_left_over_file_is_named(tmp_path: Path) -> None:
    clidocs.write_help_fixtures(tmp_path)
    assert unmatched(tmp_path, PATHS) == []
    (tmp_path / "ctl.list.txt").unlink()
    (tmp_path / "gone.txt").write_text("")
    assert unmatched(tmp_path, PATHS) == ["lastcall ctl list has no fixtures/help/ctl.list.txt",
                                          "fixtures/help/gone.txt is no command's --help",
                                          f"regenerate fixtures/help/ with: {REGENERATE}"]
    clidocs.write_help_fixtures(tmp_path)  # the generator removes what no command has
    assert unmatched(tmp_path, PATHS) == []


def test_the_terminal_width_does_not_change_the_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    assert stale(["bench"]) is None
    assert clidocs.os.environ["COLUMNS"] == "40"  # put back as it was
