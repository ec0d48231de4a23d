"""The shards' JUnit files merged into one, for ``lastcall report --merge`` (harness.report.merge).

A shard's session writes its JUnit XML where ``--junitxml`` says; the example workflow puts it in the
shard's report directory (``reports/junit.xml``), so each downloaded shard holds one.  Every ``*.xml``
file at the top of a shard's directory whose root is ``<testsuites>`` or ``<testsuite>`` is a JUnit file
(another XML document there is left alone); the merge writes ``OUT/junit.xml``: one ``<testsuite>`` (in a
``<testsuites>``, as pytest writes it) with every shard's testcases, in the order of the shards given,
and the counts (tests, failures, errors, skipped, time) recomputed from them.

FLAKY, as in the merged summary (harness.report.merge): the testcases of one item (classname and name
without the repeat index, ``-rN``, under the shard's target override) that passed in one place and failed
in another make the item flaky, and a flaky item is never reported as passed: each of its passing
testcases gets a ``<failure type="lastcall.flaky">`` whose message is the merge's FLAKY line.  Errors
(setup, teardown) and skips are not outcomes of the rule, as in one session (harness.scenario.repeat).

Bad input (exit 2 of the merge, nothing written): a ``*.xml`` that is not well-formed (an incomplete
download), or shards of which some have a JUnit file and others none (a shard's testcases would be lost).
The XML is read with the standard library's parser (expat refuses entity expansion bombs since 2.4.1).
"""

from __future__ import annotations

import copy
import os
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.scenario.repeat import base_id

__all__ = ["JUNIT", "FLAKY_TYPE", "JUnitFile", "MergedJUnit", "read_junit", "merge_junit", "write_junit",
           "outcome_of"]

JUNIT = "junit.xml"  # the merged file, in --out
FLAKY_TYPE = "lastcall.flaky"  # the type of the failure a flaky item's passing testcase gets
ROOTS = ("testsuites", "testsuite")  # the root elements of a JUnit file
_RESULTS = ("failure", "error", "skipped")


@dataclass
class JUnitFile:
    """One JUnit file of a shard: its testcases, as parsed."""

    path: Path
    shard: str  # the shard's label, as given to the merge
    target: str  # the shard's target override ("" for none): part of an item's identity
    cases: list[ET.Element] = field(default_factory=list)
    suites: list[ET.Element] = field(default_factory=list)


@dataclass
class MergedJUnit:
    root: ET.Element
    files: list[JUnitFile]
    flaky: dict[str, str]  # item -> its FLAKY line (its passing testcases are marked failed)
    cases: int


def outcome_of(case: ET.Element) -> str:
    """passed, failed, error or skipped: what a testcase's children say (a failure outweighs an error)."""
    tags = {child.tag for child in case}
    return "failed" if "failure" in tags else "error" if "error" in tags else \
        "skipped" if "skipped" in tags else "passed"


def _junit_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.xml") if p.is_file())


def read_junit(shards: Sequence[tuple[str, Path, str]]) -> tuple[list[JUnitFile], list[str]]:
    """The JUnit files of each shard ((label, directory, target override)); and the located problems."""
    files: list[JUnitFile] = []
    problems: list[str] = []
    having: dict[str, Path] = {}
    for label, directory, target in shards:
        for path in _junit_files(directory):
            try:
                root = ET.parse(path).getroot()
            except ET.ParseError as exc:
                problems.append(f"{path}: not well-formed XML ({exc}): an incomplete download of the shard?")
                continue
            except OSError as exc:
                problems.append(f"{path}: unreadable: {exc.strerror or exc}")
                continue
            if root.tag not in ROOTS:
                continue  # another XML document, not JUnit
            suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
            files.append(JUnitFile(path, label, target, list(root.iter("testcase")), suites))
            having.setdefault(label, path)
    if having and not problems:
        first = next(iter(having.values()))
        problems += [f"{label}: no JUnit file (an *.xml of <testsuites> or <testsuite>) while {first} is one: "
                     "every shard's testcases are merged, none may be lost (an incomplete download?)"
                     for label, _d, _t in shards if label not in having]
    return files, problems


def _time(value: str | None) -> float:
    try:
        return float(value or 0)
    except ValueError:
        return 0.0


def merge_junit(files: Sequence[JUnitFile], flaky_line: Callable[[str, int, int, list[str]], str]) -> MergedJUnit:
    """One testsuite of every file's testcases, the passing testcases of a flaky item marked as failed.

    ``flaky_line(item, passed, failed, where)``: the FLAKY line of an item (the merge's own wording)."""
    groups: dict[tuple[str, str, str], list[tuple[ET.Element, JUnitFile]]] = defaultdict(list)
    copies: list[tuple[ET.Element, JUnitFile]] = []
    for f in files:
        for case in f.cases:
            dup = copy.deepcopy(case)
            copies.append((dup, f))
            name = case.get("name")
            if name and outcome_of(case) in ("passed", "failed"):
                groups[(f.target, case.get("classname") or "", base_id(name))].append((dup, f))
    flaky: dict[str, str] = {}
    for (target, classname, name), members in sorted(groups.items()):
        outcomes = [outcome_of(c) for c, _f in members]
        ok = outcomes.count("passed")
        if 0 < ok < len(outcomes):
            item = f"{classname}::{name}" if classname else name
            item += f" (target {target})" if target else ""
            where = sorted({f.shard for _c, f in members})
            line = flaky_line(item, ok, len(outcomes) - ok, where)
            flaky[item] = line
            for case, _f in members:
                if outcome_of(case) == "passed":
                    ET.SubElement(case, "failure", {"type": FLAKY_TYPE, "message": line}).text = line
    suite = ET.Element("testsuite", {"name": "lastcall merged"})
    for case, _f in copies:
        suite.append(case)
    results = [outcome_of(c) for c, _f in copies]
    stamps = sorted(s.get("timestamp", "") for f in files for s in f.suites if s.get("timestamp"))
    suite.attrib.update({"errors": str(results.count("error")), "failures": str(results.count("failed")),
                         "skipped": str(results.count("skipped")), "tests": str(len(copies)),
                         "time": f"{sum(_time(c.get('time')) for c, _f in copies):.3f}",
                         **({"timestamp": stamps[0]} if stamps else {})})
    root = ET.Element("testsuites", {"name": f"lastcall merged from {len({f.shard for f in files})} shard(s)"})
    root.append(suite)
    return MergedJUnit(root, list(files), flaky, len(copies))


def write_junit(merged: MergedJUnit, out: Path) -> Path:
    """Write ``out/junit.xml`` (to a temporary name, then renamed); raises OSError."""
    path = out / JUNIT
    tmp = out / f".{JUNIT}.tmp"
    ET.indent(merged.root)
    ET.ElementTree(merged.root).write(tmp, encoding="utf-8", xml_declaration=True)
    os.replace(tmp, path)
    return path
