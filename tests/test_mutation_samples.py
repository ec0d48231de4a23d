"""Fresh mutation samples (harness.mutate.samples): a seed drawn at run time, every completed sample kept, and
the headline only from five fresh samples of at least 30 mutants on one commit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.mutate import samples
from harness.mutate.scopes import SCOPES, Scope


def _doc(commit: str, killed: int, of: int = 40, *, seed: int = 7, planned: int | None = None) -> dict[str, Any]:
    return {"date": "2026-12-07", "commit": commit, "seed": seed, "planned": of if planned is None else planned,
            "raw": {"killed": killed, "all": of}, "non_equivalent": {"killed": killed, "all": of},
            "command": f"./dev mutate --sample {of} --seed {seed} --record"}


def test_a_drawn_seed_is_no_one_s_choice() -> None:
    seeds = {samples.draw_seed() for _ in range(20)}
    assert len(seeds) > 15 and all(1 <= s < 2**31 for s in seeds)


def test_every_sample_is_appended_and_none_dropped(tmp_path: Path) -> None:
    record = tmp_path / "samples.json"
    samples.append(_doc("aaa", 30), drawn=True, path=record)
    kept = samples.append(_doc("bbb", 35), drawn=False, path=record)
    assert [s["commit"] for s in kept] == ["aaa", "bbb"]
    assert json.loads(record.read_text())["samples"][0]["non_equivalent"] == {"killed": 30, "all": 40}
    assert json.loads(samples.outcomes_of(record, 7).read_text())["commit"] == "bbb"  # the sample's own outcomes


@pytest.mark.parametrize("scope", SCOPES, ids=lambda s: s.name)
def test_every_recorded_sample_keeps_its_outcomes(scope: Scope) -> None:
    """Each line of a committed record has the run it sums up beside it, and they agree: its survivors can be read."""
    entries = json.loads(scope.record.read_text())["samples"] if scope.record.exists() else []
    for line in entries:
        doc = json.loads(samples.outcomes_of(scope.record, line["seed"]).read_text())
        assert samples.entry(doc, drawn=line["drawn"]) == line


def _entries(*docs: tuple[dict[str, Any], bool]) -> list[dict[str, Any]]:
    return [samples.entry(d, drawn=drawn) for d, drawn in docs]


def test_the_headline_is_the_median_of_five_fresh_samples_on_one_commit() -> None:
    five = _entries(*((_doc("c1", k), True) for k in (36, 37, 38, 39, 40)))
    assert samples.headline(five).startswith("median of the last 5 fresh samples on c1: **95.0 %**")
    assert "met" in samples.headline(five)
    low = _entries(*((_doc("c1", k), True) for k in (30, 31, 32, 33, 34)))
    assert "**missed**" in samples.headline(low)


@pytest.mark.parametrize(("docs", "says"), [
    ([], "no fresh sample of at least 30 mutants yet"),
    ([(_doc("c1", 40), False)] * 5, "no fresh sample"),  # a chosen seed is not fresh
    ([(_doc("c1", 20, of=20), True)] * 5, "no fresh sample"),  # too small
    ([(_doc("c1", 30, planned=60), True)] * 5, "no fresh sample"),  # cut short
    ([(_doc("c1", 40), True)] * 5 + [(_doc("c2", 10), True)], "1 of the 5 fresh samples needed on c2"),
])
def test_only_fresh_whole_samples_of_one_commit_make_a_headline(docs: list[tuple[dict[str, Any], bool]],
                                                                says: str) -> None:
    assert samples.headline(_entries(*docs)).startswith(says)


@pytest.mark.parametrize("scope", SCOPES, ids=[s.name for s in SCOPES])
def test_the_page_s_table_is_rendered_from_the_record(scope: Scope) -> None:
    page = scope.page.read_text()
    begin, end = scope.markers
    start, stop = page.index(begin) + len(begin), page.index(end)
    on_disk = json.loads(scope.record.read_text())["samples"] if scope.record.exists() else []
    assert page[start:stop].strip() == samples.markdown(on_disk, scope.record).strip(), (
        f"docs/mutation.md's fresh-samples table of the {scope.name} differs from {scope.record.name}: "
        "python -c 'from harness.mutate.scopes import render_samples; render_samples()'")


def test_a_sample_without_a_seed_draws_one_and_says_how_to_run_it_again(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from harness.mutate.command import _seed

    args = argparse.Namespace(seed=None, sample=30)
    assert _seed(args) is True and isinstance(args.seed, int)
    assert f"--seed {args.seed} runs this sample again" in capsys.readouterr().err
    given = argparse.Namespace(seed=5, sample=30)
    assert _seed(given) is False and given.seed == 5  # a seed given: the sample is not fresh
