"""The expected outcome of each engine scenario on a real engine: a lost finding is a failure, not silence.

``docs/findings/<engine>/expected.yaml`` maps a scenario name to what each of its checkers is expected to give
on that engine, from the runs the findings page reports::

    engine-sigterm-idle:
      runs: 5                       # how many runs the expectation rests on
      outcome: ok                   # the run's outcome (ok, or hung: the harness ended a hang); default ok
      checkers:
        engine_tree_exits: ok       # the same status on every run
        engine_nothing_left: violated
        engine_port_released: {violated: [1, 3]}   # a rate: violated in 1 to 3 runs of 5 (else ok)
        engine_exit_status: {unknown: [1, 3], else: violated}   # unknown in 1 to 3, violated in the others

A status (``ok``, ``violated``, ``unknown``) is what every run gave.  A rate ``{STATUS: [LO, HI]}`` (of
``runs``) is a nondeterministic finding: STATUS was given in LO to HI of the runs, ``ok`` in the others
(or the status ``else:`` names).
:func:`differences` compares one run's verdicts with it: a rated checker may give either status the range
allows (STATUS when HI > 0, the other one when LO < runs); :func:`rate_differences` compares a repeat's counts with the
range, scaled to the repeat's size.  A checker of the run the file does not name is not judged by it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.errors import ConfigError
from harness.verdicts_file import read_meta

__all__ = ["Expected", "Rate", "load_expected", "differences", "rate_differences", "tally", "STATUSES", "OUTCOMES"]

STATUSES = ("ok", "violated", "unknown")
OUTCOMES = ("ok", "hung")


@dataclass(frozen=True)
class Rate:
    """``status`` in ``lo`` to ``hi`` of ``of`` runs, ``otherwise`` (ok unless given) in the others."""

    status: str
    lo: int
    hi: int
    of: int
    otherwise: str = "ok"

    def allows(self) -> set[str]:
        return ({self.status} if self.hi > 0 else set()) | ({self.otherwise} if self.lo < self.of else set())

    def __str__(self) -> str:
        rest = "" if self.otherwise == "ok" else f", else {self.otherwise}"
        return f"{self.status} in {self.lo}-{self.hi} of {self.of} runs{rest}"


@dataclass(frozen=True)
class Expected:
    """One scenario's expectation: each checker's status or rate, the run's outcome, the runs it rests on."""

    runs: int
    outcome: str = "ok"
    checkers: dict[str, str | Rate] = field(default_factory=dict)

    def statuses(self) -> dict[str, str]:
        """The checkers expected to give one status on every run (rated ones left out)."""
        return {k: v for k, v in self.checkers.items() if isinstance(v, str)}


def _want(path: Path, name: str, chk: str, value: Any, runs: int) -> str | Rate:
    if isinstance(value, str) and value in STATUSES:
        return value
    if isinstance(value, dict):
        rated = {k: v for k, v in value.items() if k != "else"}
        otherwise = value.get("else", "ok")
        if (len(rated) == 1 and (status := next(iter(rated))) in STATUSES and otherwise in STATUSES
                and otherwise != status and isinstance(rng := rated[status], list) and len(rng) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) for x in rng)
                and 0 <= rng[0] <= rng[1] <= runs):
            return Rate(str(status), rng[0], rng[1], runs, str(otherwise))
    raise ConfigError(f"{path}: {name}: {chk}: give {' | '.join(STATUSES)}, or a rate {{STATUS: [LO, HI]}} with "
                      f"0 <= LO <= HI <= runs ({runs}) and optionally else: ANOTHER_STATUS (default ok); "
                      f"found {value!r}")


def load_expected(path: Path) -> dict[str, Expected]:
    """Scenario name -> its :class:`Expected`.

    Error handling: ConfigError naming the file and the entry when it is not of the form above."""
    try:
        raw: Any = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read the expected outcomes: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of scenario names")
    out: dict[str, Expected] = {}
    for name, entry in raw.items():
        checkers = entry.get("checkers") if isinstance(entry, dict) else None
        if not isinstance(checkers, dict):
            raise ConfigError(f"{path}: {name}: give checkers: {{CHECKER: {' | '.join(STATUSES)}}}")
        runs = entry.get("runs", 1)
        if not isinstance(runs, int) or isinstance(runs, bool) or runs < 1:
            raise ConfigError(f"{path}: {name}: runs is a count of runs (1 or more), found {runs!r}")
        outcome = entry.get("outcome", "ok")
        if outcome not in OUTCOMES:
            raise ConfigError(f"{path}: {name}: outcome is {' or '.join(OUTCOMES)}, found {outcome!r}")
        out[str(name)] = Expected(runs, str(outcome), {str(k): _want(path, str(name), str(k), v, runs)
                                                       for k, v in checkers.items()})
    return out


def differences(got: Mapping[str, str], want: Expected | Mapping[str, str], outcome: str | None = None) -> list[str]:
    """One line per checker whose status is not one ``want`` allows (a missing verdict is one too), and the
    run's ``outcome`` when given and not the expected one."""
    wants = want.checkers if isinstance(want, Expected) else dict(want)
    out = []
    for chk, w in wants.items():
        allowed = w.allows() if isinstance(w, Rate) else {w}
        if got.get(chk) not in allowed:
            out.append(f"{chk}: expected {w}, got {got.get(chk, 'no verdict')}")
    if outcome is not None and isinstance(want, Expected) and outcome != want.outcome:
        out.append(f"outcome: expected {want.outcome}, got {outcome}")
    return out


def rate_differences(runs: Sequence[Mapping[str, str]], want: Expected) -> list[str]:
    """A repeat's verdicts (one mapping per run) against ``want``: every run's fixed statuses, and each rated
    checker's count of its status within the range scaled to ``len(runs)`` (rounded outwards)."""
    out = []
    for i, got in enumerate(runs):
        fixed: dict[str, str | Rate] = dict(want.statuses())
        out += [f"run {i + 1}: {d}" for d in differences(got, Expected(want.runs, want.outcome, fixed))]
    n = len(runs)
    for chk, w in want.checkers.items():
        if not isinstance(w, Rate):
            continue
        k = sum(1 for got in runs if got.get(chk) == w.status)
        lo, hi = math.floor(w.lo * n / w.of), math.ceil(w.hi * n / w.of)
        others = [got.get(chk) for got in runs if got.get(chk) not in (w.status, w.otherwise)]
        if not lo <= k <= hi or others:
            out.append(f"{chk}: expected {w} (here {lo}-{hi} of {n}), got {w.status} in {k} of {n}"
                       + (f" and {', '.join(map(str, others))}" if others else ""))
    return out


def tally(dirs: Sequence[Path], variant: str = "vllm_engine") -> dict[str, dict[str, Any]]:
    """The runs stored under ``dirs`` (each run's ``verdicts.json``, one level down or the dir itself) of
    ``variant``, by scenario: how many, their outcomes, each checker's statuses counted, each run's seconds."""
    out: dict[str, dict[str, Any]] = {}
    for d in dirs:
        for f in sorted([d / "verdicts.json"] if (d / "verdicts.json").is_file() else d.glob("*/verdicts.json")):
            doc, problems = read_meta(f)  # a stored run is data: every field used checked for its shape
            if problems:
                raise ConfigError("; ".join(problems))
            if doc.get("variant") != variant or not {"scenario", "outcome", "verdicts"} <= doc.keys():
                continue
            t = out.setdefault(doc["scenario"], {"runs": 0, "outcomes": {}, "checkers": {}, "seconds": [],
                                                  "step_errors": []})
            t["runs"] += 1
            t["seconds"].append(doc.get("seconds"))
            status = doc["outcome"]["status"]
            t["outcomes"][status] = t["outcomes"].get(status, 0) + 1
            if doc.get("step_error"):
                t["step_errors"].append(doc["step_error"])
            for v in doc["verdicts"]:
                counts = t["checkers"].setdefault(v["checker"], {})
                counts[v["status"]] = counts.get(v["status"], 0) + 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m harness.engine.expected tally DIR...``: each scenario's runs under DIR, as k of N per
    checker status (the rates a findings page and expected.yaml give)."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] != "tally":
        print("usage: python -m harness.engine.expected tally REPORTS_DIR...", file=sys.stderr)
        return 2
    dirs = [Path(a) for a in args[1:]]
    missing = [str(d) for d in dirs if not d.is_dir()]
    if missing:
        print(f"error: no such directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    for name, t in sorted(tally(dirs).items()):
        n = t["runs"]
        secs = [s for s in t["seconds"] if s is not None]
        print(f"{name}: {n} run(s), outcomes {t['outcomes']}, {min(secs):.0f}-{max(secs):.0f} s each"
              if secs else f"{name}: {n} run(s)")
        for chk, counts in sorted(t["checkers"].items()):
            print(f"  {chk}: " + ", ".join(f"{s} {k} of {n}" for s, k in sorted(counts.items())))
        for err in t["step_errors"]:
            print(f"  step error: {err}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
