"""A listener run in-process must not leave its umask in the harness's process: every process started from it
later (a fork server, its workers) would inherit it. A clean-clone CI run saw the reference fail
starts-are-private-and-once (directories of mode 0600) after the contract's full matrix had run the planted
bug leaves_umask in the same xdist worker, which then started its fork server with the umask 0177."""

from __future__ import annotations

import os
from pathlib import Path

from harness import leakguard
from harness.contract import CHECKS, run_check
from harness.reference.variants import VARIANTS


def _umask() -> int:
    now = os.umask(0o022)
    os.umask(now)
    return now


def test_the_contract_puts_back_a_umask_its_variant_leaks(lc_root: Path) -> None:
    before = _umask()
    run_check(CHECKS[0], VARIANTS["leaves_umask"], lc_root)  # any check: each starts the listener in-process
    assert _umask() == before


def test_the_leak_guard_names_a_changed_umask_and_puts_it_back() -> None:
    before = leakguard.take()
    assert before.umask == _umask()
    old = os.umask(0o177)
    try:
        found = leakguard.diff(before)
        assert _umask() == before.umask  # put back
    finally:
        os.umask(old)
    assert [f for f in found if "umask" in f] == [
        f"the process umask changed from {before.umask:#05o} to 0o177 (put back)"]
