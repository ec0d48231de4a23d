"""The expected outcome of each engine scenario on a real engine: a lost finding is a failure, not silence.

``docs/findings/<engine>/expected.yaml`` maps a scenario name to what each of its checkers is expected to give
on that engine, from the runs the findings page reports::

    engine-sigterm-idle:
      runs: 5                       # how many runs the expectation rests on
      outcome: ok                   # the run's outcome (ok, or hung: the harness ended a hang); default ok
      checkers:
        engine_tree_exits: ok       # the same status on every run
        engine_nothing_left: violated
        engine_port_released: {violated: 2}   # a rate: violated in 2 of the 5 runs (ok in the others)
        engine_exit_status: {unknown: 2, else: violated}   # unknown in 2 of 5, violated in the others

An entry ``not_applicable: WHY`` says the code the scenario drives is not in that release: it is not run.
A status (``ok``, ``violated``, ``unknown``) is what every run gave.  A rate ``{STATUS: K}`` (of ``runs``) is a
nondeterministic finding: STATUS was given in K of the runs, ``ok`` in the others (or the status ``else:``
names).  :func:`differences` compares one run's verdicts with it: a rated checker may give either status.
:func:`rate_differences` judges a repeat of n runs as a rate: its count of STATUS against K of ``runs`` by
Fisher's exact test (two-sided), accepted unless the two rates differ at the false-alarm rate ALPHA (1 %); a
rate of 6 in 14 does not fail a run of 5 four times in ten.  A checker of the run the file does not name is
not judged by it.
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

__all__ = ["Expected", "Rate", "load_expected", "differences", "rate_differences", "stored_differences", "run_statuses",
           "fisher_p", "tally", "STATUSES", "OUTCOMES", "ALPHA"]

STATUSES = ("ok", "violated", "unknown")
OUTCOMES = ("ok", "hung")
_WORST = ("violated", "unknown", "ok")  # one run's several verdicts of a checker: the first of these it gave
ALPHA = 0.01  # the false-alarm rate of a repeat judged against a stored rate: one run of a hundred that is fine fails


@dataclass(frozen=True)
class Rate:
    """``status`` in ``k`` of ``of`` runs, ``otherwise`` (ok unless given) in the others."""

    status: str
    k: int
    of: int
    otherwise: str = "ok"

    def allows(self) -> set[str]:
        return ({self.status} if self.k > 0 else set()) | ({self.otherwise} if self.k < self.of else set())

    def __str__(self) -> str:
        rest = "" if self.otherwise == "ok" else f", else {self.otherwise}"
        return f"{self.status} in {self.k} of {self.of} runs{rest}"


def fisher_p(k: int, n: int, x: int, m: int) -> float:
    """The two-sided p-value of Fisher's exact test that ``k`` in ``n`` and ``x`` in ``m`` come from one rate:
    the probability, given k + x successes in n + m trials, of a split at most as likely as this one.  Written
    with math.comb (hypergeometric terms) rather than scipy, which lastcall does not otherwise need."""
    total, hits = n + m, k + x

    def p(i: int) -> float:  # i of the hits fall in the first sample
        return math.comb(n, i) * math.comb(m, hits - i) / math.comb(total, hits)

    seen = p(k)
    lo, hi = max(0, hits - m), min(n, hits)
    return min(1.0, sum(q for i in range(lo, hi + 1) if (q := p(i)) <= seen * (1 + 1e-9)))


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
                and otherwise != status and isinstance(k := rated[status], int) and not isinstance(k, bool)
                and 0 < k < runs):
            return Rate(str(status), k, runs, str(otherwise))
    raise ConfigError(f"{path}: {name}: {chk}: give {' | '.join(STATUSES)}, or a rate {{STATUS: K}}: STATUS in K "
                      f"of the runs ({runs}), 0 < K < runs, and optionally else: ANOTHER_STATUS (default ok); "
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
        if isinstance(entry, dict) and "not_applicable" in entry:
            continue  # the code it drives is not in this release (harness.engine.releases shows it so)
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


def rate_differences(runs: Sequence[Mapping[str, str]], want: Expected, alpha: float = ALPHA) -> list[str]:
    """A repeat's verdicts (one mapping per run) against ``want``: every run's fixed statuses, and each rated
    checker's count of its status against the stored rate by Fisher's exact test (:func:`fisher_p`): a
    difference only where the two rates differ at the false-alarm rate ``alpha``."""
    out = []
    for i, got in enumerate(runs):
        fixed: dict[str, str | Rate] = dict(want.statuses())
        out += [f"run {i + 1}: {d}" for d in differences(got, Expected(want.runs, want.outcome, fixed))]
    n = len(runs)
    for chk, w in want.checkers.items():
        if not isinstance(w, Rate):
            continue
        x = sum(1 for got in runs if got.get(chk) == w.status)
        others = [got.get(chk) for got in runs if got.get(chk) not in (w.status, w.otherwise)]
        p = fisher_p(w.k, w.of, x, n)
        if p < alpha or others:
            out.append(f"{chk}: expected {w}, got {w.status} in {x} of {n}"
                       + (f" and {', '.join(map(str, others))}" if others else "")
                       + (f" (Fisher's exact test: p = {p:.4f} < {alpha:g})" if p < alpha else ""))
    return out


def _rank(status: str) -> int:
    return _WORST.index(status) if status in _WORST else len(_WORST)  # a status of no known kind: the mildest


def run_statuses(verdicts: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """One status per checker of one run: a checker a scenario asks of several steps (stop_latency of each stop)
    gives its worst, violated over unknown over ok, so a count of runs is never a count of verdicts."""
    out: dict[str, str] = {}
    for v in verdicts:
        chk, status = v["checker"], v["status"]
        if chk not in out or _rank(status) < _rank(out[chk]):
            out[chk] = status
    return out


def stored_differences(runs: Sequence[Mapping[str, str]], outcomes: Sequence[str], want: Expected) -> list[str]:
    """The runs an expectation was written from (each run's verdicts and outcome) against it, exactly: as many
    runs as it says, every fixed status in each, each rate's status in exactly K of them (else ``otherwise``)."""
    out = [] if len(runs) == want.runs else [f"runs: expected {want.runs}, found {len(runs)}"]
    out += [f"run {i + 1}: outcome: expected {want.outcome}, got {o}" for i, o in enumerate(outcomes)
            if o != want.outcome]
    for chk, w in want.checkers.items():
        got = [r.get(chk, "no verdict") for r in runs]
        if isinstance(w, Rate):
            if got.count(w.status) != w.k or got.count(w.otherwise) != len(got) - w.k:
                out.append(f"{chk}: expected {w}, got " + ", ".join(f"{s} {got.count(s)}" for s in sorted(set(got))))
        elif set(got) - {w}:
            out.append(f"{chk}: expected {w} in every run, got " + ", ".join(got))
    return out


def tally(dirs: Sequence[Path], variant: str = "vllm_engine") -> dict[str, dict[str, Any]]:
    """The runs stored under ``dirs`` (each run's ``verdicts.json``, one level down or the dir itself) of
    ``variant``, by scenario: how many, their outcomes, each checker's statuses counted over the runs
    (:func:`run_statuses`), each run's seconds."""
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
            for chk, status in run_statuses(doc["verdicts"]).items():
                counts = t["checkers"].setdefault(chk, {})
                counts[status] = counts.get(status, 0) + 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m harness.engine.expected tally [--variant V] DIR...``: each scenario's runs of variant V
    (default vllm_engine; vllm_nixl for the NIXL listener's) under DIR, as k of N per checker status (the rates
    a findings page and expected.yaml give)."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    variant = "vllm_engine"
    if args[1:2] == ["--variant"] and len(args) > 2:
        variant, args = args[2], args[:1] + args[3:]
    if len(args) < 2 or args[0] != "tally" or args[1].startswith("-"):
        print("usage: python -m harness.engine.expected tally [--variant VARIANT] REPORTS_DIR...", file=sys.stderr)
        return 2
    dirs = [Path(a) for a in args[1:]]
    missing = [str(d) for d in dirs if not d.is_dir()]
    if missing:
        print(f"error: no such directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    for name, t in sorted(tally(dirs, variant).items()):
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
