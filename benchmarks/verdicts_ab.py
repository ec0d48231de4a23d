"""Whether a change moved any verdict: every scenario item of the library, run on two trees, what each run fired.

Run:  .venv/bin/python benchmarks/verdicts_ab.py OLD_TREE [--json OUT]

OLD_TREE is a checkout of the commit before the change (``git worktree add /tmp/old COMMIT``). Every item of
``scenarios/`` that this tree's pytest collects (the reference's items and each planted bug's catches item, the CPU
ones) runs once, one after another, in a process importing OLD_TREE's ``harness`` (PYTHONPATH: the editable install
would otherwise import this tree's), then once more importing this tree's; each side's own pytest collection says
what an item runs (its matrix point, and the variant a catches item resolves to). For each item the script keeps
the set of violated checkers, whether a step failed and why the run is broken, and prints every item whose record
differs, then a line: the count of items, the differences, each side's wall time. Exit 0 when nothing differs, 1
when something does, 2 for bad input. A timing-sensitive checker may differ between any two runs of one tree; rerun
a differing item before calling it the change's doing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_ONE_SIDE = r"""
import contextlib, io, json, sys, time
import pytest
from harness.scenario.runner import run_item

class Grab:  # the tree's own collection resolves each item: its matrix point, and the variant a catch runs
    items = []
    def pytest_collection_finish(self, session):
        Grab.items = [it for it in session.items if hasattr(it, "matrix")]

with contextlib.redirect_stdout(io.StringIO()):  # the collection's listing is not this script's output
    pytest.main(["--collect-only", "-q", "-p", "no:randomly", "scenarios/"], plugins=[Grab()])
ids, out = json.load(open(sys.argv[1])), {}
found = {it.nodeid: it for it in Grab.items}
t0 = time.monotonic()
for nid in ids:
    it = found.get(nid)
    if it is None:  # a scenario or item this tree lacks
        out[nid] = ["absent"]
        continue
    r = run_item(it.matrix, variant=it.variant)
    out[nid] = [sorted({v.checker for v in r.violated}), bool(r.step_error), r.broken or ""]
json.dump({"records": out, "wall_s": time.monotonic() - t0}, open(sys.argv[2], "w"))
"""


def collected() -> list[str]:
    """The node ids of the CPU scenario items this tree's pytest collects."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", "scenarios/"],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    return [line.strip() for line in proc.stdout.splitlines() if "::" in line and "-cpu" in line]


def one_side(tree: Path, ids: list[str], work: Path) -> dict[str, object]:
    """Run ``ids`` importing ``tree``'s harness, from ``tree``; its records and wall time."""
    (work / "ids.json").write_text(json.dumps(ids))
    out = work / f"{tree.name}.json"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, "-c", _ONE_SIDE, str(work / "ids.json"), str(out)], cwd=tree, env=env,
                   check=True)
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("old_tree", help="a checkout of the commit before the change")
    p.add_argument("--json", default=None, help="also write both sides' records here")
    args = p.parse_args(argv)
    old = Path(args.old_tree).resolve()
    if not (old / "harness" / "__init__.py").is_file() or not (old / "scenarios").is_dir():
        p.error(f"{args.old_tree}: not a lastcall checkout (no harness/ or scenarios/)")
    ids = collected()
    if not ids:
        p.error("pytest collected no scenario item here")
    with tempfile.TemporaryDirectory(prefix="lastcall-verdicts-ab-") as tmp:
        before = one_side(old, ids, Path(tmp))
        after = one_side(ROOT, ids, Path(tmp))
    a, b = before["records"], after["records"]
    assert isinstance(a, dict) and isinstance(b, dict)
    differ = [nid for nid in ids if a.get(nid) != b.get(nid)]
    for nid in differ:
        print(f"{nid}: before {a.get(nid)}, after {b.get(nid)}")
    print(f"{len(ids)} items, {len(differ)} differ; wall {before['wall_s']:.1f} s before, "
          f"{after['wall_s']:.1f} s after")
    if args.json:
        Path(args.json).write_text(json.dumps({"before": before, "after": after}, indent=1))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
