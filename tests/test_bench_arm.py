"""``lastcall bench --arm T`` for a worker target (harness/bench/target_arm.py), kvcached 0.1.6 first.

kvcached's own code runs in a forked child of the test (its package imports torch: imported here
once, so each child's import of kvcached is quick), exactly as the bench's arms import it
(:func:`harness.bench.target_arm.kvcached_tp_ipc`), and reports back through a pipe.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import pickle
import re
import select
import signal
import socket
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lc_helpers import ROOT

from harness import cli
from harness.bench import target_arm
from harness.bench.target_arm import TRACKING_NOOP_SUFFIX, expand, kvcached_tp_ipc, new_root, resolve
from harness.reference import wire
from harness.targets.fetch import cached_source
from harness.targets.kvcached import KvcachedTarget, PickleCodec

KV = "kvcached==0.1.6"
CHILD_SAFETY_S = 120.0  # the most a child may stay silent before it counts as hung
needs_kvcached = pytest.mark.skipif(cached_source("kvcached", "0.1.6") is None,
                                    reason="kvcached 0.1.6 is not in the cache: run `lastcall fetch kvcached==0.1.6`")


@pytest.fixture(scope="module")
def torch_loaded() -> None:
    import torch  # noqa: F401  kvcached's package imports it first; the children inherit it


def in_child(fn: Callable[[], Any]) -> Any:
    """``fn()`` run in a forked child; its result (pickled through a pipe), or its error re-raised here."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(r)
        try:
            out: Any = ("ok", fn())
        except BaseException:
            out = ("error", traceback.format_exc())
        try:
            os.write(w, pickle.dumps(out))
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    with os.fdopen(r, "rb") as f:
        while select.select([f], [], [], CHILD_SAFETY_S)[0]:  # a safety net: a hung child is killed, not waited on
            chunk = f.read1(1 << 16)
            if not chunk:
                break
            data += chunk
        else:
            os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    status, value = pickle.loads(data) if data else ("error", "the child wrote nothing")
    if status != "ok":
        raise AssertionError(f"in the child:\n{value}")
    return value


# ---------------------------------------------------------------- the codec
@needs_kvcached
def test_the_pickle_codec_round_trips_through_kvcacheds_own_recv_msg_and_send_msg(torch_loaded: None,
                                                                                    tmp_path: Path) -> None:
    codec = PickleCodec()
    requests = [wire.Request(cmd="kv_tensors_created"),
                wire.Request(cmd="map_to_kv_tensors", offsets=[0, 2 << 20, 4 << 20]),
                wire.Request(cmd="prepare_unmap_from_kv_tensors", offsets=[0], transaction_id="t7"),
                wire.Request(cmd="commit_unmap_from_kv_tensors", transaction_id="t7")]
    replies = [{"status": "success", "created": True}, {"status": "success", "newly_mapped_offsets": [0, 2 << 20]},
               {"status": "prepared"}, {"status": "error", "message": "boom", "error_type": "state_consistency",
                                        "phase": "commit"}]

    def child() -> tuple[list[Any], list[wire.Reply]]:
        t = kvcached_tp_ipc(KvcachedTarget("0.1.6"), str(tmp_path), True)
        got, back = [], []
        a, b = socket.socketpair()
        with a, b:
            for req, rep in zip(requests, replies, strict=True):
                a.sendall(codec.encode_request(req))
                got.append(t.recv_msg(b))  # kvcached's own decoder
                t.send_msg(b, rep)  # ... and encoder
                back.append(codec.decode_reply(wire.recv_frame(a)))
        return got, back

    got, back = in_child(child)
    assert got == [{"cmd": "kv_tensors_created", "group_id": 0},
                   {"cmd": "map_to_kv_tensors", "group_id": 0, "offsets": [0, 2 << 20, 4 << 20]},
                   {"cmd": "prepare_unmap_from_kv_tensors", "group_id": 0, "offsets": [0], "transaction_id": "t7"},
                   {"cmd": "commit_unmap_from_kv_tensors", "group_id": 0, "transaction_id": "t7"}]
    assert [(r.status, r.created, r.newly_mapped_offsets, r.error_type, r.phase, r.message) for r in back] == [
        ("success", True, None, None, None, None), ("success", None, [0, 2 << 20], None, None, None),
        ("prepared", None, None, None, None, None), ("error", None, None, "state_consistency", "commit", "boom")]


# ------------------------------------------------------- the tracking no-op
def _parked_stop(tracking: bool) -> dict[str, Any]:
    """In a child: kvcached's listener, one client connected that never sends; stop, then the client leaves."""
    root = new_root()
    try:
        t = kvcached_tp_ipc(KvcachedTarget("0.1.6"), root, tracking)
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - kvcached prints its starts and stops
        t.start_worker_listener_thread(0, 0)
        listener = t._listeners[(0, 0)]
        probe_a, probe_b = socket.socketpair()
        with probe_b:  # track_conn before any stop: in the set stop() cancels reads of, as shipped
            tracked = (listener.track_conn(probe_a), probe_a in listener._conns)
            listener.untrack_conn(probe_a)
        parked = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        parked.connect(t.get_worker_socket_path(0, 0))
        first = t.stop_worker_listener_threads(0.5)  # the expected False waits this long: a bound, not a timer
        parked.close()  # an untracked read now ends (EOF) and the loop sees the stop flag
        second = first or t.stop_worker_listener_threads(10.0)
        probe_a, probe_b = socket.socketpair()
        with probe_b:  # track_conn after stop began: refused as shipped, taken without tracking
            taken = listener.track_conn(probe_a)
            in_set = probe_a in listener._conns
            listener.untrack_conn(probe_a)
        return {"class": type(listener).__name__, "base": type(listener).__mro__[1].__name__, "tracked": tracked,
                "first": first,
                "second": second, "taken_after_stop": taken, "in_set": in_set, "closed": probe_a.fileno() == -1,
                "left": os.listdir(root)}
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(root)  # empty when kvcached's stop removed its directory ("left" says so)


@needs_kvcached
def test_the_tracking_noop_arm_really_has_no_tracking(torch_loaded: None) -> None:
    """As shipped, stop cancels a parked read and returns True; with tracking a no-op it cannot (False), and
    it returns True once the client leaves. The no-op listener is a subclass of kvcached's own."""
    shipped, noop = in_child(lambda: _parked_stop(True)), in_child(lambda: _parked_stop(False))
    assert shipped == {"class": "_WorkerListener", "base": "object", "tracked": (True, True), "first": True,
                       "second": True, "taken_after_stop": False, "in_set": False, "closed": True, "left": []}
    assert noop == {"class": "UntrackedWorkerListener", "base": "_WorkerListener", "tracked": (True, False),
                    "first": False, "second": True,
                    "taken_after_stop": True, "in_set": False, "closed": True, "left": []}


@pytest.mark.parametrize("method", ["_accept", "_close"])
def test_the_tracking_noop_arms_methods_are_the_references_less_its_lock_and_stop_check(method: str) -> None:
    """``lastcall bench``'s default comparison is only about tracking if the no-op arm is the reference's code
    less exactly that (a hand copy that drifted once measured the drift, 9 %): its methods are compiled from the
    reference's source, and what they touch is the reference's less the lock and the stop flag."""
    from harness.bench.arms import TrackingNoop
    from harness.reference.listener import WorkerListener

    made, ref = getattr(TrackingNoop, method).__code__, getattr(WorkerListener, method).__code__
    assert made.co_filename == ref.co_filename and made.co_firstlineno == ref.co_firstlineno
    assert "_lock" in ref.co_names and "_lock" not in made.co_names
    # the reference compiled as it is written (pytest rewrote its asserts when the plugin imported it)
    import inspect
    import textwrap
    import types

    module = compile(textwrap.dedent(inspect.getsource(getattr(WorkerListener, method))), "<reference>", "exec")
    plain = next(c for c in module.co_consts if isinstance(c, types.CodeType))
    assert set(made.co_names) == set(plain.co_names) - {"_lock", *({"_stopping"} if method == "_accept" else ())}


# ------------------------------------------------------------- arm names
@needs_kvcached
def test_an_arm_alone_expands_to_its_tracking_noop_and_its_aa() -> None:
    assert expand([KV]) == ([KV + TRACKING_NOOP_SUFFIX, KV], 1)
    assert expand(["reference"]) == (["reference"], 0)
    assert expand([KV, "reference"]) == ([KV, "reference"], 0)
    arm = resolve(KV + TRACKING_NOOP_SUFFIX)
    assert arm is not None and not arm.tracking and isinstance(arm.codec, PickleCodec)
    assert resolve("reference") is None and resolve("harness.bench.arms:TRACKING_NOOP") is None


@pytest.mark.parametrize("argv, message", [
    (["--arm", "kvcachd==0.1.6"], "unknown target 'kvcachd==0.1.6' (did you mean 'kvcached'?)"),
    (["--arm", "kvcached==0.0.9"], "arm 'kvcached==0.0.9': kvcached 0.0.9 is not in the cache: run "
                                   "`lastcall fetch kvcached==0.0.9`"),
    (["--arm", "vllm_engine"], "arm 'vllm_engine' is not a worker target (EngineTarget"),
    (["--arm", "never_stopped"], "arm 'never_stopped' is not a worker target (HandshakeTarget"),
    (["--arm", "reference+tracking-noop"], "the reference's tracking no-op is harness.bench.arms:TRACKING_NOOP"),
])
def test_bad_arms_exit_2_with_one_line_naming_the_fix(argv: list[str], message: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", *argv, "--windows", "3", "--requests", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


@needs_kvcached
@pytest.mark.parametrize("extra, message", [
    (["--arm", "kvcached==0.1.5"], "this kvcached has no stop path (stop_worker_listener_threads)"),
    (["--arm", KV, "--keep-alive"], "serves one request per connection; drop --keep-alive"),
    (["--arm", KV, "--backend", "allocator"], "drop --backend allocator"),
])
def test_what_a_target_arm_cannot_do_exits_2(extra: list[str], message: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    if "kvcached==0.1.5" in extra and cached_source("kvcached", "0.1.5") is None:
        pytest.skip("kvcached 0.1.5 is not in the cache: run `lastcall fetch kvcached==0.1.5`")
    assert cli.main(["bench", *extra, "--windows", "3", "--requests", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_a_target_without_a_bench_side_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(target_arm, "BENCH_SIDES", {})
    with pytest.raises(Exception, match=re.escape("the bench cannot serve KvcachedTarget's listener")):
        resolve(KV)


# ------------------------------------------------------------ the docs table
def _script(name: str) -> Any:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_the_committed_kvcached_table_re_renders_from_its_json() -> None:
    mod, docpage = _script("bench_kvcached"), _script("docpage")
    data = json.loads(docpage.data_path(mod.NAME).read_text())
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    assert docpage.between(text, mod.NAME) == mod.tables(data), (
        "docs/benchmarks.md's kvcached-bench table differs from its JSON: rerun benchmarks/bench_kvcached.py "
        "--write, do not edit the table")
    assert set(data["runs"]) == {"tracking", "reference"}
    for op, figure in mod.THREAD.items():  # the thread's own figures are shown beside ours
        assert op in data["runs"]["tracking"]["ops"] and f"+{figure:.1f} %" in text


# ------------------------------------------------------------- end to end
@pytest.mark.slow
@needs_kvcached
def test_lastcall_bench_arm_kvcached_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    roots_before = set(Path("/tmp").glob("lcb-*"))
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "bench", "--arm", KV, "--windows", "3",
                           "--requests", "20", "--warmup", "0", "--seed", "3", "--json", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    noop, shipped = KV + TRACKING_NOOP_SUFFIX, KV
    assert r["baseline"] == noop and r["aa_arm"] == f"{shipped} (A/A)" and r["settings"]["aa_of"] == shipped
    assert r["problems"] == [] and r["leak_checks"] == 3 * 3 * 3
    for op in ("kv_tensors_created", "map16", "unmap_pair"):
        o = r["ops"][op]
        assert set(o["arms"]) == {noop, shipped, f"{shipped} (A/A)"}
        assert all(a["median_us"] > 0 and len(a["window_medians_us"]) == 3 for a in o["arms"].values())
        assert set(o["vs_baseline"]) == {shipped} and o["aa_floor"] is not None
    assert f"{KV}+tracking-noop (us)" in proc.stdout and "A/A floor" in proc.stdout
    assert set(Path("/tmp").glob("lcb-*")) <= roots_before  # every arm's socket root is gone


def test_a_flavoured_module_attribute_arm_loads_as_its_worker_will() -> None:
    """The worker loads its arm through load_target, which reads module:a.b as an attribute path: a flavoured
    module:attribute spec must survive that (it did not: every module:attribute arm failed to start)."""
    from harness.bench.arms import TRACKING_NOOP, flavoured
    from harness.targets import load_target

    v = load_target(flavoured("harness.bench.arms:TRACKING_NOOP"))
    assert v.name == "TRACKING_NOOP [noop+quiet]" and issubclass(v.listener, TRACKING_NOOP.listener)
    assert load_target(flavoured("reference", "allocator", True)).name == "reference [allocator+recorded]"
