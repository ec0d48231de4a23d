"""The merge on shards made by real sessions: two pytest sub-sessions split the same scenario items
(``--repeat 2 --splits 2 --group 1`` and ``--group 2``, by the committed .test_durations), each
writing its reports and JUnit; ``lastcall report --merge`` of the two agrees with one unsharded session of
the same items: the same items with the same outcomes, the same exit status, the same totals."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from lc_helpers import ROOT

from harness.report.summary import SESSION

FILES = ["scenarios/kv-state-matches-what-the-client-was-told.yaml"]  # two items (a run, a catch), each run twice


def session(out: Path, *split: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    return subprocess.run([sys.executable, "-m", "pytest", *FILES, "-n", "0", "-q", "--repeat", "2", *split,
                           "--durations-path", str(ROOT / ".test_durations"), f"--lastcall-reports={out}",
                           f"--junitxml={out / 'junit.xml'}"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def junit_cases(path: Path) -> list[tuple[str, str, tuple[str, ...]]]:
    """(classname, name, its children's tags but the output) of each testcase, sorted."""
    return sorted((c.get("classname", ""), c.get("name", ""),
                   tuple(ch.tag for ch in c if ch.tag not in ("system-out", "system-err", "properties")))
                  for c in ET.parse(path).getroot().iter("testcase"))


def outcomes(root: Path) -> dict[str, str]:
    return {r["nodeid"]: r["outcome"] for r in json.loads((root / SESSION).read_text())["runs"]}


@pytest.mark.slow
def test_two_real_shards_merge_into_what_one_unsharded_session_says(tmp_path: Path) -> None:
    shards = [tmp_path / "shards" / f"shard-{g}" for g in (1, 2)]
    for g, out in enumerate(shards, 1):
        # least_duration deals the items out by duration (the repeats, equal, alternate): repeats of one item
        # land on both shards
        proc = session(out, "--splits", "2", "--group", str(g), "--splitting-algorithm", "least_duration")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        assert f"[pytest-split] Running group {g}/2" in proc.stdout
        assert (out / "junit.xml").is_file() and (out / "index.html").is_file()
    whole = tmp_path / "whole"
    proc = session(whole)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]

    one, two = outcomes(shards[0]), outcomes(shards[1])
    assert one and two and not set(one) & set(two)  # each shard ran some items, none ran an item twice
    assert set(one) | set(two) == set(outcomes(whole))
    bases = {re.sub(r"-r\d+\]$", "]", n) for n in one} & {re.sub(r"-r\d+\]$", "]", n) for n in two}
    assert bases, "no item has repeats on both shards: the split does not exercise FLAKY across shards"

    out = tmp_path / "shards"
    merged = subprocess.run([str(Path(sys.executable).parent / "lastcall"), "report", "--merge", *map(str, shards),
                             "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert (merged.returncode, merged.stderr) == (0, ""), merged.stdout + merged.stderr
    assert outcomes(out) == outcomes(whole)
    totals = json.loads((whole / SESSION).read_text())["runs"]
    n = len(totals)
    assert f"{n} scenario runs: {n} passed, 0 failed, 0 skipped, from 2 shards; summary: {out / 'index.html'}" in \
        merged.stdout, merged.stdout
    assert "FLAKY" not in merged.stdout
    page = (out / "index.html").read_text()
    for link in re.findall(r'href="([^"]+)"', page):
        assert (out / link).is_file(), link  # every run's page, where its shard wrote it
    assert len(re.findall(r'href="', page)) == n
    # and the shards' JUnit files: one testsuite with what the unsharded session's JUnit says
    assert f"junit: {out / 'junit.xml'}, " in merged.stdout
    assert junit_cases(out / "junit.xml") == junit_cases(whole / "junit.xml")
    assert len(ET.parse(out / "junit.xml").getroot().findall("testsuite")) == 1
