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
A shard's XML is data, read bounded: a regular file only (a link, FIFO or device is refused before it is
read), at most :data:`MAX_JUNIT_BYTES` a file and :data:`MAX_JUNIT_TOTAL` over the merge, no document
type declaration (so no entity is declared, let alone expanded, and nothing outside the file is read: a
JUnit file has none), elements at most :data:`MAX_XML_DEPTH` deep and :data:`MAX_ELEMENTS` over the merge.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from xml.parsers import expat

from harness.artifacts import MIB, ArtifactError, read_bytes, shown
from harness.scenario.repeat import base_id

__all__ = ["JUNIT", "FLAKY_TYPE", "JUnitFile", "MergedJUnit", "read_junit", "merge_junit", "write_junit",
           "outcome_of", "parse_junit", "MAX_JUNIT_BYTES", "MAX_JUNIT_TOTAL", "MAX_ELEMENTS", "MAX_XML_DEPTH"]

MAX_JUNIT_BYTES = 16 * MIB  # one JUnit file of a shard
MAX_JUNIT_TOTAL = 64 * MIB  # every shard's JUnit files, in one merge
MAX_ELEMENTS = 250_000  # elements of every shard's JUnit files, in one merge (pytest writes 1 to 4 a test)
MAX_XML_DEPTH = 32  # elements inside each other (pytest writes 4: testsuites, testsuite, testcase, failure)
MAX_TIME = 1e9  # seconds of a testcase read back; another time counts as 0
MAX_XML_FILES = 64  # *.xml files at the top of one shard's directory

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


class _Refused(Exception):
    """The XML is well-formed, but not a JUnit file lastcall reads."""


def parse_junit(data: bytes, elements: int = MAX_ELEMENTS) -> tuple[ET.Element, int]:
    """The root element of the XML document ``data``, and how many elements it has: expat.ExpatError when it is
    not well-formed, _Refused when it has a DTD, is nested past :data:`MAX_XML_DEPTH` or has more than
    ``elements`` elements (checked as it is parsed: memory stays bounded)."""
    builder = ET.TreeBuilder()
    parser = expat.ParserCreate()
    parser.buffer_text = True
    depth = count = 0

    def start(tag: str, attrs: dict[str, str]) -> None:
        nonlocal depth, count
        depth, count = depth + 1, count + 1
        if depth > MAX_XML_DEPTH:
            raise _Refused(f"elements nested deeper than {MAX_XML_DEPTH}")
        if count > elements:
            raise _Refused(f"more elements than lastcall reads in one merge ({MAX_ELEMENTS})")
        builder.start(tag, attrs)

    def end(tag: str) -> None:
        nonlocal depth
        depth -= 1
        builder.end(tag)

    def dtd(*_args: object) -> None:
        raise _Refused("a document type declaration (<!DOCTYPE>), which no JUnit file has: lastcall declares and "
                       "expands no entities")

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = builder.data
    parser.StartDoctypeDeclHandler = dtd
    parser.EntityDeclHandler = dtd
    parser.Parse(data, True)
    return builder.close(), count


def _junit_files(directory: Path) -> list[Path]:
    """The *.xml entries at the top of ``directory`` but directories (at most MAX_XML_FILES + 1 of them)."""
    found: list[Path] = []
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.endswith(".xml") and not entry.is_dir(follow_symlinks=False):
                found.append(Path(entry.path))
                if len(found) > MAX_XML_FILES:
                    break
    return sorted(found)


def read_junit(shards: Sequence[tuple[str, Path, str]]) -> tuple[list[JUnitFile], list[str]]:
    """The JUnit files of each shard ((label, directory, target override)); and the located problems."""
    files: list[JUnitFile] = []
    problems: list[str] = []
    having: dict[str, Path] = {}
    left = [MAX_JUNIT_TOTAL, MAX_ELEMENTS]  # bytes and elements the merge may still read
    for label, directory, target in shards:
        try:
            paths = _junit_files(directory)
        except OSError as exc:
            problems.append(f"{shown(directory)}: cannot list its *.xml files: {exc.strerror or exc}")
            continue
        if len(paths) > MAX_XML_FILES:
            problems.append(f"{shown(directory)}: more than {MAX_XML_FILES} *.xml files: lastcall merges at most "
                            f"{MAX_XML_FILES} of a shard")
            continue
        for path in paths:
            root = _read_one(path, left, problems)
            if root is None or root.tag not in ROOTS:
                continue  # unreadable (a problem), or another XML document, not JUnit
            suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
            files.append(JUnitFile(path, label, target, list(root.iter("testcase")), suites))
            having.setdefault(label, path)
    if having and not problems:
        first = next(iter(having.values()))
        problems += [f"{shown(label)}: no JUnit file (an *.xml of <testsuites> or <testsuite>) while {shown(first)} "
                     "is one: every shard's testcases are merged, none may be lost (an incomplete download?)"
                     for label, _d, _t in shards if label not in having]
    return files, problems


def _read_one(path: Path, left: list[int], problems: list[str]) -> ET.Element | None:
    """One XML file parsed, within what the merge may still read (``left``: bytes, elements, spent here); None
    when it cannot be read (a located line added to ``problems``)."""
    if left[0] <= 0:
        problems.append(f"{shown(path)}: the shards' JUnit files are more than lastcall reads in one merge "
                        f"({MAX_JUNIT_TOTAL // MIB} MiB)")
        return None
    try:
        data = read_bytes(path, min(MAX_JUNIT_BYTES, left[0]), "JUnit XML file")
        left[0] -= len(data)
        root, count = parse_junit(data, left[1])
        left[1] -= count
        return root
    except ArtifactError as exc:
        problems.append(shown(exc))
    except expat.ExpatError as exc:
        problems.append(f"{shown(path)}: not well-formed XML ({exc}): an incomplete download of the shard?")
    except _Refused as exc:
        problems.append(f"{shown(path)}: {exc}: not a JUnit file lastcall merges")
    return None


def _time(value: str | None) -> float:
    """A testcase's time attribute, in seconds; one that is no finite duration (``inf``, ``-1``, ``1e400``)
    counts as 0."""
    try:
        t = float(value or 0)
    except ValueError:
        return 0.0
    return t if math.isfinite(t) and 0 <= t <= MAX_TIME else 0.0


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
    ET.indent(merged.root)
    fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{JUNIT}.", suffix=".tmp")  # fresh: never a link planted there
    try:
        with os.fdopen(fd, "wb") as f:
            ET.ElementTree(merged.root).write(f, encoding="utf-8", xml_declaration=True)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path
