"""docs/targets.md carries a whole target (tinykv): its blocks, written into a directory outside the checkout,
run library scenarios through ``lastcall run`` as a user would, and ``lastcall contract --target``; the correct
target passes, its planted bug is caught.  (Broken in a scratch copy, e.g. its teardown's unlink dropped, this
test fails: no_leftover_paths.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from lc_helpers import ROOT

PAGE = ROOT / "docs" / "targets.md"
BLOCK = re.compile(r'^```python title="([^"]+)"\n(.*?)^```$', re.M | re.S)
SCENARIOS = ("stalled-read-is-cancelled", "executing-handler-is-drained", "drain-timeout-keeps-everything",
             "stop-from-a-handler-returns-at-once", "kept-alive-connection-is-reused",
             "idle-client-does-not-block-others")


def blocks(text: str) -> dict[str, str]:
    """The page's files: title -> source."""
    return {title: body for title, body in BLOCK.findall(text)}


def test_the_page_has_the_whole_package() -> None:
    files = blocks(PAGE.read_text())
    assert set(files) == {"tinykv/listener.py", "tinykv/target.py"}
    for name, src in files.items():
        compile(src, name, "exec")
        harness = re.findall(r"^(?:from|import) harness.*$", src, re.M)  # only the target API and the events
        assert all(re.fullmatch(r"from harness\.(targets import api|events import [\w, ]+)", ln) for ln in harness), \
            (name, harness)


@pytest.mark.slow  # about 4 s: nine scenario runs in worker processes (the bug's wait 1 s for a drain), the contract
def test_the_page_target_passes_library_scenarios_and_its_bug_is_caught(tmp_path: Path) -> None:
    """As a user runs it: the package in the working directory, nothing on PYTHONPATH, the installed command."""
    for name, body in blocks(PAGE.read_text()).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body)
    (tmp_path / "tinykv" / "__init__.py").write_text("")
    xml = tmp_path / "junit.xml"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["LASTCALL_STRICT_EVENTS"] = "1"
    lastcall = shutil.which("lastcall", path=os.path.dirname(sys.executable))  # the console script beside python
    assert lastcall, f"no lastcall command beside {sys.executable}: install the project (./dev setup)"
    out = subprocess.run([lastcall, "run", "--target", "tinykv.target:TARGET",
                          "--lastcall-reports=", f"--junitxml={xml}",
                          *(str(ROOT / "scenarios" / f"{s}.yaml") for s in SCENARIOS)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    cases = list(ET.parse(xml).getroot().iter("testcase"))
    passed = {c.get("name", "") for c in cases if c.find("skipped") is None and c.find("failure") is None}
    for s in SCENARIOS:
        assert any(n.startswith(f"{s}[tp1-pp1-cpu]") for n in passed), (s, passed)
    caught = {n for n in passed if n.endswith("-catches-teardown_while_alive]")}
    assert caught == {"executing-handler-is-drained[tp1-pp1-cpu-catches-teardown_while_alive]",
                      "drain-timeout-keeps-everything[tp1-pp1-cpu-catches-teardown_while_alive]"}, passed
    contract = subprocess.run([lastcall, "contract", "--target", "tinykv.target:TARGET"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert contract.returncode == 0, contract.stdout + contract.stderr
    assert re.search(r"keeps (\d+)/\1 of the checks it can take .*; 2/2 of its planted bugs' rows broken .*; "
                     r"0 surprises", contract.stdout), contract.stdout
