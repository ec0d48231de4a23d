"""What ``./dev mutate`` measures: the reference's stop path, or with ``--engine`` the engine stand-in's.

A scope says, once, which functions are mutated (its stop-path list), which scenarios run against each mutant
(the casts its files' mutants are judged by), and where its samples are recorded (the run's JSON, the record of
fresh samples, and that record's table in docs/mutation.md).  Everything else (the mutator, the frozen copy of
the package each mutant runs from, the scores, the equivalents of mutation/equivalent.yaml, the headline's rule
and its 90 % target) is the same for every scope.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.mutate import samples
from harness.mutate.plan import HERE, STOP_PATH, read_stop_path, subjects_of
from harness.mutate.run import Subject, cast_of_file, scenarios_for
from harness.mutate.table import DATA as REFERENCE_DATA

__all__ = ["Scope", "REFERENCE", "ENGINE", "SCOPES", "groups_of", "render_samples"]


def _engine_cast(rel: str) -> str:
    """Every stand-in mutant runs the engine scenarios (the stand-in is their engine)."""
    return "engine"


@dataclass(frozen=True)
class Scope:
    """One subject of ``./dev mutate``."""

    name: str  # as the record's table names it
    stop_path: Path  # the functions mutated (MODULE:QUALNAME, one a line)
    casts: tuple[str, ...]  # the scenario casts its mutants run against, in the order their groups run
    cast_of: Callable[[str], str]  # a mutated file (as ids name it) -> the cast whose scenarios judge its mutants
    data: Path  # --record: the run's outcomes, every mutant (written after each)
    record: Path  # --record of a sample: the fresh samples, appended, none dropped
    markers: tuple[str, str]  # where ``page`` shows the record's table
    page: Path = samples.PAGE  # docs/mutation.md
    measured_tables: bool = False  # --record re-renders the page's tables of the sample grown on (from ``data``)


REFERENCE = Scope("reference", STOP_PATH, ("worker", "handshake"), cast_of_file, REFERENCE_DATA, samples.RECORD,
                  (samples.BEGIN, samples.END), measured_tables=True)
ENGINE = Scope("engine stand-in", HERE / "engine-stop-path.txt", ("engine",), _engine_cast,
               REFERENCE_DATA.with_name("mutation_engine.json"),
               samples.RECORD.with_name("mutation_samples_engine.json"),
               ("<!-- mutation-samples-engine:begin -->", "<!-- mutation-samples-engine:end -->"))
SCOPES = (REFERENCE, ENGINE)


def groups_of(scope: Scope, library: Path | None = None) -> list[tuple[str, list[Subject], list[str]]]:
    """(cast, its subjects, its scenario files) for each cast of ``scope`` that has a mutated file.

    Error handling: ConfigError located at the stop-path line that names no function, or for scenario files
        that do not load.
    """
    subjects = subjects_of(read_stop_path(scope.stop_path), scope.stop_path)
    library = library or HERE.parent / "scenarios"
    out = []
    for cast in scope.casts:
        mine = [s for s in subjects if scope.cast_of(s.rel) == cast]
        if mine:
            out.append((cast, mine, scenarios_for([str(library)], (cast,))))
    return out


def render_samples() -> None:
    """Write every scope's record of fresh samples between its markers of its page."""
    for scope in SCOPES:
        samples.render(scope.page, scope.record, scope.markers)
