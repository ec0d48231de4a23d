"""In-repo pytest wiring only: the plugin itself is harness/plugin.py (entry point ``lastcall``)."""

import os
import shutil
import sys

import pytest

# lastcall's own suite checks every recorded event against harness.events (a bad one breaks the run);
# set before any recorder exists, and inherited by every process a test starts
os.environ.setdefault("LASTCALL_STRICT_EVENTS", "1")

# Bytecode where the environment forbids writing it (PYTHONDONTWRITEBYTECODE=1, as on the shared machine): every
# interpreter the suite starts (the xdist workers, each sub-session, `lastcall` run and fork server) would
# compile harness/ from source again, and each pytest process rewrite the asserts of every module of the
# plugin's distribution and of the tests (about 9 s of CPU a pytest process, 0.5 s an interpreter that imports
# harness; docs/suite-profile.md).  The suite writes it, as Python does by default (and a CI runner that does
# not set the variable): __pycache__/ is git-ignored, and each cached file is checked against its source's
# mtime and size.  A mutation run still sets PYTHONDONTWRITEBYTECODE=1 for its own processes, whose mutants
# live in fresh temporary directories.  LASTCALL_SUITE_BYTECODE=0 leaves the variable as it is.
if os.environ.get("PYTHONDONTWRITEBYTECODE") and os.environ.get("LASTCALL_SUITE_BYTECODE", "1") != "0":
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    sys.dont_write_bytecode = False

# Hypothesis under CI (CI set, as .ci/run and GitHub Actions set it) draws the same examples on every run
# (derandomize: each test's seed is a hash of the test), so a gating run fails only on what the change did; a
# developer's run still explores new examples each time and keeps what fails in .hypothesis/ to replay.
# LASTCALL_HYPOTHESIS_PROFILE names another profile (default, ci) for one run.
try:
    from hypothesis import settings
except ImportError:  # an environment without the dev extras runs no Hypothesis test
    pass
else:
    settings.register_profile("ci", derandomize=True, print_blob=True)
    _profile = os.environ.get("LASTCALL_HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "default")
    settings.load_profile(_profile)


def pytest_unconfigure(config):
    """An xdist worker of lastcall's own suite freezes its objects once its session is over (its reports sent,
    every test's leak check done): the interpreter's finalization would walk every object for cycles, twice,
    0.6 s of a worker that imported torch, waited for by the controller.  Frozen, they are still freed as modules
    are torn down.  Only this suite's workers do it: the plugin leaves every user's session as pytest runs it,
    and no run of a system under test is in this process by then."""
    if hasattr(config, "workerinput"):
        import gc

        gc.freeze()


@pytest.fixture
def short_tmp():
    """A short private directory for what binds Unix sockets under it (an engine's VLLM_RPC_BASE_PATH): sun_path
    holds 107 bytes, and tmp_path under xdist (/tmp/pytest-of-USER/pytest-N/popen-gwN/<test name>N/) outgrows it
    once the session counter N has a few digits."""
    from harness.names import temp_root

    root = temp_root()
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)
