"""A harness killed with SIGTERM unwinds like ^C: every live run is closed and nothing it started stays.

Found the hard way: `pkill -f` of a table run left an engine's /dev/shm usage segment behind (the fork
server SIGKILLs its children when the harness vanishes, so their owners cannot remove what they own).
The scenario is given by an absolute path outside the repository, from the repository: pytest then roots
the session at the scenario's directory, which the plugin used to resolve the file against (and fail).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from lc_helpers import ROOT, until, until_created

PARKED = """\
name: parked-until-terminated
about: A map parked in the backend until the harness is terminated.
catches: [lost_unmap, leaks_a_child]
config: {drain_timeout: 200ms, exit_budget: 200ms}
steps:
  - start: cluster
  - arm: {site: backend.map_to_kv_tensors, on: {rank: 0}, action: pause, as: f1}
  - call: {op: map, offsets: [0], as: m1}
  - wait: {reached: f1}
  - wait: {returned: m1, timeout: 120s}
expect:
  - no_leftover_paths
"""


def mine(tags: list[str]) -> list[str]:
    """What the runs of the processes tagged ``tags`` (``{pid}x``) own under /dev/shm and /tmp."""
    shm = [f"/dev/shm/{n}" for n in os.listdir("/dev/shm") if any(f"r{t}" in n for t in tags)]
    tmp = [f"/tmp/{n}" for n in os.listdir("/tmp") if any(n.startswith(f"lc-{t}") for t in tags)]
    return shm + tmp


def _tags(pid: int) -> list[str]:
    """The run-id prefixes of ``pid`` and its descendants (an xdist worker runs the scenario under -n)."""
    try:
        family = [pid] + [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = [pid]
    return [f"{p}x" for p in family]


LASTCALL = str(Path(sys.executable).parent / "lastcall")  # the console script, as a person runs it


@pytest.mark.parametrize(("argv", "keyword", "code"), [
    pytest.param([LASTCALL, "run"], "not catches", 130, id="lastcall-run"),
    # a bare pytest session under xdist, as CI runs it, its whole process group terminated (as a job
    # timeout does): the plugin makes SIGTERM an interrupt in the controller and in each worker
    pytest.param([sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider"], "not catches", 2,
                 id="pytest-n2-group"),
    # a catches item (its planted bug's run) interrupted: the session ends there, the next one never starts
    pytest.param([sys.executable, "-m", "pytest", "-p", "no:cacheprovider"], "catches", 2, id="pytest-catches"),
])
@pytest.mark.slow
def test_sigterm_closes_the_live_run_and_leaves_nothing(argv: list[str], keyword: str, code: int,
                                                       tmp_path: Path) -> None:
    scenario = tmp_path / "parked.yaml"
    scenario.write_text(PARKED)
    group = argv[0] != LASTCALL
    # its reports under this test's directory: the session's rootdir is the common ancestor of ROOT and the scenario
    # (reports/ goes there by default), which for a clone under /tmp was /tmp itself (a clean-clone run left
    # /tmp/reports behind)
    reports = tmp_path / "reports"
    proc = subprocess.Popen([*argv, str(scenario), "-k", keyword, f"--lastcall-reports={reports}"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=group)
    try:
        tags: list[str] = []

        def live() -> bool:  # the engine's usage segment appears once the cluster is up, its worker soon after
            tags[:] = _tags(proc.pid)
            if proc.poll() is not None:
                return True
            with contextlib.suppress(psutil.NoSuchProcess):  # fork server, engine, worker (xdist's too)
                if len(psutil.Process(proc.pid).children(recursive=True)) >= 3:
                    return any(n.startswith("/dev/shm/") for n in mine(tags))
            return False

        def started() -> bool:  # the run's usage segment, or the harness gone (asserted below)
            return proc.poll() is not None or any(n.startswith("/dev/shm/") for n in mine(_tags(proc.pid)))

        # blocked until an entry appears in /dev/shm: no core spun away from the session it waits for (of two here)
        until_created(started, "/dev/shm", proc.pid, 60.0)
        until(live, 10.0)  # at once, or a fork later: the engine and its worker are forked together
        assert proc.poll() is None, proc.communicate()
        family = psutil.Process(proc.pid).children(recursive=True)
        assert len(family) >= 3
        if group:
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # the test failed with the run live: none of its tree may outlive the test
            stragglers: list[psutil.Process] = []
            with contextlib.suppress(psutil.NoSuchProcess):
                stragglers = psutil.Process(proc.pid).children(recursive=True)
            proc.kill()
            proc.communicate()
            for p in stragglers:
                with contextlib.suppress(psutil.NoSuchProcess):
                    p.kill()
            psutil.wait_procs(stragglers, timeout=10)  # reparented to this subreaper: reaped here
    _gone, alive = psutil.wait_procs(family, timeout=10)
    left = mine(tags)
    for path in left:  # a failing run's leftovers are this test's to remove
        shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)
    assert proc.returncode == code, out[-2000:] + err[-2000:]  # pytest says 2 for an interrupted session
    assert alive == [], f"outlived the harness: {alive}"
    assert left == [], "left behind by a terminated run"
    assert "1 scenario run: 0 passed, 0 failed, 0 skipped, 1 interrupted" in out, out[-2000:]  # not a pass
    assert json.loads((reports / "session.json").read_text())["runs"][0]["outcome"] == "interrupted"
