"""An engine scenario's target parameters (topology.tp, config's engine flags) reach the launch, by vLLM's names.

The same flags go to ``vllm serve`` and to the stand-in (harness.targets.vllm_engine.EngineFlags); the host
(harness.engine.host) resolves them from the scenario: ``--tensor-parallel-size`` from topology.tp,
``--shutdown-timeout`` and ``--kv-transfer-config`` from config, and the NIXL side channel's port: a free port
of the run, or the port a hold_port step before the start holds (played before the launch).  A hung engine's
processes are dumped (stacks) before the watchdog kills them, and each /dev/shm segment or semaphore is
attributed to the pids that held it.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.engine.host import LAUNCHES, EngineHost
from harness.errors import ConfigError
from harness.history import Recorder
from harness.scenario.loader import expand, loads
from harness.scenario.player import engine_launches
from harness.scenario.runner import run_item
from harness.targets.vllm_engine import STANDIN, STANDIN_BOUND_SCALE, TARGET, EngineFlags, EngineTarget
from tests.test_engine_host import HUNG

NIXL = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}


def _scenario(config: str, steps: str = "", topology: str = "") -> str:
    return f"""\
name: engine-flags
about: flags
target: engine_standin
catches: [engine_ignores_sigterm]
{topology}
config: {config}
steps:
{steps}  - start: engine
  - engine_signal: {{to: api_server, sig: SIGTERM, as: term}}
  - wait_gone: {{timeout: 5s, as: gone}}
  - engine_restart: {{as: again}}
expect:
  - engine_tree_exits: {{within: 5s}}
"""


def test_default_flags_add_nothing_to_either_command() -> None:
    assert EngineFlags().default() and EngineFlags().argv() == [] and EngineFlags().env() == {}
    cmd = STANDIN.engine_command(8000)
    assert cmd.argv[-2:] == ["--variant", "standin"] and cmd.env == {}


def test_flags_are_given_by_vllms_names_to_the_standin_and_to_vllm_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    flags = EngineFlags(tp=2, shutdown_timeout=5, kv_connector="NixlConnector", side_channel_port=5601)
    want = ["--tensor-parallel-size", "2", "--shutdown-timeout", "5", "--kv-transfer-config", json.dumps(NIXL)]
    env = {"VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1", "VLLM_NIXL_SIDE_CHANNEL_PORT": "5601"}
    standin = STANDIN.engine_command(8000, flags)
    assert standin.argv[-len(want):] == want and standin.env == env
    import harness.targets.vllm_model as vm

    monkeypatch.setattr(vm, "tiny_model", lambda: Path("/models/tiny"))  # no model build: the command only
    serve = TARGET.engine_command(8000, flags)
    assert serve.argv[1:4] == ["serve", "/models/tiny", "--port"] and serve.argv[-len(want):] == want
    assert "--dtype" in serve.argv and serve.argv[serve.argv.index("--dtype") + 1] == "float32"
    assert serve.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5601"
    assert serve.env["VLLM_CPU_OMP_THREADS_BIND"] in ("0|1", "0|0")  # one core per worker (2 cores here)
    assert "VLLM_CPU_OMP_THREADS_BIND" not in TARGET.engine_command(8000, EngineFlags()).env


def test_real_vllm_execs_unless_the_environment_asks_for_the_zygote(monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.targets.vllm_model as vm
    from harness.errors import ConfigError
    from harness.targets.vllm_engine import VLLM_ENV, VLLM_PRELOAD

    monkeypatch.setattr(vm, "tiny_model", lambda: Path("/models/tiny"))
    monkeypatch.delenv("LASTCALL_ENGINE_PRELOAD", raising=False)
    assert TARGET.engine_command(8000).preload == ()  # `vllm serve` exec'd, as a user runs it
    monkeypatch.setenv("LASTCALL_ENGINE_PRELOAD", "1")
    serve = TARGET.engine_command(8000)
    assert serve.preload == VLLM_PRELOAD and "vllm.entrypoints.cli.serve" in serve.preload
    assert serve.preload_env == VLLM_ENV  # the zygote imports under the launch's constant variables
    assert STANDIN.engine_command(8000).preload == ()  # the stand-in execs (ready in 0.05 s)
    monkeypatch.setenv("LASTCALL_ENGINE_PRELOAD", "0")
    assert TARGET.engine_command(8000).preload == ()
    monkeypatch.setenv("LASTCALL_ENGINE_PRELOAD", "yes")
    with pytest.raises(ConfigError, match=r"LASTCALL_ENGINE_PRELOAD='yes': expected a finite number from 0 to 1"):
        TARGET.engine_command(8000)


@pytest.mark.parametrize(("config", "message"), [
    ("{shutdown_timeout: 1500ms}", "shutdown_timeout is whole seconds"),
    ("{shutdown_timeout: 900s}", "at most 600"),
    ("{side_channel_port: 5600}", "side_channel_port needs kv_connector: NixlConnector"),
    ("{kv_connector: LMCacheConnector}", "NixlConnector"),
    ("{kv_connector: NixlConnector, side_channel_port: nope}", "undefined step name 'nope'"),
])
def test_bad_engine_flags_are_located_errors(config: str, message: str) -> None:
    from harness.scenario.errors import ScenarioError

    with pytest.raises(ScenarioError, match=message) as info:
        loads(_scenario(config), "flags.yaml")
    assert "flags.yaml:" in str(info.value)


def _host(text: str, tp: int = 1, target: str = "engine_standin") -> EngineHost:
    sc = loads(text, "flags.yaml")
    cluster = SimpleNamespace(variant=target, root=Path("/nonexistent"), rec=Recorder(role="harness"),
                              deadline_s=1.0, tp=tp, scenario=sc)
    return EngineHost(cluster)


def test_the_host_resolves_the_scenarios_flags_and_a_free_side_channel_port_once() -> None:
    host = _host(_scenario("{shutdown_timeout: 3s, kv_connector: NixlConnector}", topology="topology: {tp: 2}"),
                 tp=2)
    flags = host.flags()
    assert (flags.tp, flags.kv_connector) == (2, "NixlConnector")
    # the drain is on the target's clock, as its bounds are: a fifth for the stand-in, whole seconds for vLLM
    assert flags.shutdown_timeout == pytest.approx(3 * STANDIN_BOUND_SCALE) and host.scale == STANDIN_BOUND_SCALE
    real = _host(_scenario("{shutdown_timeout: 3s}"), target="vllm_engine")
    assert real.scale == 1 and real.flags().argv() == ["--shutdown-timeout", "3"]
    assert flags.side_channel_port and host.flags().side_channel_port == flags.side_channel_port  # the run's own
    assert host.launches == 2  # the start and the restart
    assert host.c.deadline_s == 1.0 + 2 * host.launch_s
    assert not host.start_may_fail()
    fixed = _host(_scenario("{kv_connector: NixlConnector, side_channel_port: 5999}"))
    assert fixed.flags().side_channel_port == 5999


def test_a_held_side_channel_port_is_the_hold_port_steps_and_a_failed_start_is_then_the_outcome() -> None:
    host = _host(_scenario("{kv_connector: NixlConnector, side_channel_port: held}", "  - hold_port: {as: held}\n"))
    assert host.start_may_fail()
    with pytest.raises(ConfigError, match="no hold_port step 'held' holds a port before the start"):
        host.flags()
    host.c.rec.emit("step_returned", step="held", kind="hold_port", ok=True, value=5123, port=5123)
    assert host.flags().side_channel_port == 5123


def test_launches_follow_the_scenarios_restarts() -> None:
    with_restart = loads(_scenario("{}"), "x.yaml")
    without = loads(_scenario("{}").replace("  - engine_restart: {as: again}\n", ""), "x.yaml")
    assert (engine_launches(with_restart), engine_launches(without)) == (2, 1)
    host = _host(_scenario("{}"))
    assert host.launches == LAUNCHES  # a cluster whose runner counted nothing: the first launch and one restart
    cluster = SimpleNamespace(variant="engine_standin", root=Path("/nonexistent"), rec=Recorder(role="harness"),
                              deadline_s=1.0, tp=1, scenario=without, launches=engine_launches(without))
    assert EngineHost(cluster).launches == 1


def test_hold_port_before_start_is_played_before_the_engine_launches() -> None:
    """The port is held when the engine starts: the stand-in is launched with it as its side channel port."""
    text = _scenario("{kv_connector: NixlConnector, side_channel_port: held}", "  - hold_port: {as: held}\n")
    item = expand(loads(text, "flags.yaml"))[0]
    result = run_item(item)
    held = next(e for e in result.events if e.kind == "step_returned" and e.data.get("step") == "held")
    launched = next(e for e in result.events if e.kind == "engine_launched")
    assert held.t_ns < launched.t_ns
    assert launched.data["env"]["VLLM_NIXL_SIDE_CHANNEL_PORT"] == str(held.data["value"])
    failed = next(e for e in result.events if e.kind == "engine_start_failed")  # the stand-in refuses it
    assert failed.data["error"].endswith("(fix: a port the engine binds is taken by another process: stop it, or "
                                         "let the run pick free ports)")
    # the scenario held the port: the failed start is its outcome, not a run that did not start (its later
    # signal step is what cannot be played here)
    assert not result.broken and "EngineStartError" not in result.step_error
    with socket.socket() as s:  # the hold ended with the run
        s.bind(("127.0.0.1", held.data["value"]))


# the watchdog's scenario of tests/test_engine_host.py: a stand-in that ignores SIGTERM past the deadline


# A hung engine run's stacks of every process: tests/test_engine_host.py, beside the watchdog's kill (one run).


@pytest.mark.parametrize(("line", "fix"), [
    ("importlib.metadata.PackageNotFoundError: No package metadata was found for vllm", "vllm_shim install"),
    ("RuntimeError: Worker failed with error 'NIXL is not available', please check", "installs nixl and nixl-cu12"),
    ("ModuleNotFoundError: No module named 'transformers'", "lacks a module vLLM imports"),
    ("OSError: /m does not appear to have a file named config.json", "the model directory does not load"),
    ("zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:5600')", "taken by another process"),
    ("Fatal Python error: Illegal instruction", "--dtype float32"),
])
def test_a_failed_starts_output_names_its_fix(line: str, fix: str) -> None:
    from harness.targets.vllm_engine import diagnose

    assert fix in (diagnose(f"INFO starting\n{line}\nINFO the end") or "")
    assert diagnose("INFO: Application startup complete.") is None


BROKEN = EngineTarget("broken", "a stand-in that cannot start", "standin", variant="no_such_variant", launch_s=5.0)


def test_a_start_that_fails_on_its_own_is_one_line_with_the_engines_last_lines_kept() -> None:
    """The stand-in refuses an unknown variant (argparse: exit 2): a failed first start, recorded with its
    output's last lines; no fix is claimed for output no FIXES entry knows."""
    text = HUNG.replace("tests.test_engine_host:STUBBORN", "tests.test_engine_flags:BROKEN").replace(
        "config: {deadline: 500ms}\n", "")
    result = run_item(expand(loads(text, "<broken>"))[0])
    failed = next(e for e in result.events if e.kind == "engine_start_failed")
    assert "exited with status 2 before it was ready" in failed.data["error"]
    assert "invalid choice: 'no_such_variant'" in failed.data["tail"]
    assert "fix" not in failed.data and "\n" not in failed.data["error"]
    assert result.step_error.startswith("EngineStartError")
