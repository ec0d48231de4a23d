"""Launch-to-ready of each engine target: what one engine launch costs a real-engine scenario.

    .venv-vllm-engine/bin/python benchmarks/engine_launch.py [--reps 3] [--tp2] [--write]
    .venv/bin/python benchmarks/engine_launch.py --from-reports DIR... [--write]

Each launch is the harness's own (harness.engine.tree.EngineTree, the target's command as a scenario's run
launches it, in a fresh temporary directory, on a free port): seconds from the launch to the engine's ready
line, then SIGTERM and the seconds until the whole tree is gone.  Launches take turns (one engine at a time).
The stand-in engine always runs; ``vllm_engine`` runs where vLLM is installed (the engine venv), TP=1 and,
with ``--tp2``, TP=2, by each launcher in turn, interleaved: ``exec`` (``vllm serve`` exec'd) and ``zygote``
(a fork of a process that has imported vLLM runs the ``vllm`` script: harness.launch.zygote; its first launch
includes the zygote's own start).  From the medians: each real-engine scenario's cost is 60 s of its own plus
one launch bound (harness.targets.vllm_engine: launch_s) per launch, its watchdog deadline (harness.engine.host).
``--from-reports`` launches no vLLM: it reads the same figure (``engine_ready``'s ready_s, each launch the
harness made, and ``engine_launched``'s launcher; ``exec`` where a run predates it) from stored scenario runs
(``lastcall run --lastcall-reports DIR``), by target, TP and launcher, so the launches real-engine scenarios
already paid for are the sample, and sums each launcher's launch to ready over its runs: the launch per
scenario, amortised (target: <= 15 s).  ``--write`` commits the result:
docs/data/engine_launch.json and its table in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import docpage

from harness.engine.host import free_port, remove_segments, shm_owners
from harness.engine.tree import EngineStartError, EngineTree
from harness.probes.snapshot import take
from harness.targets.vllm_engine import STANDIN, TARGET, EngineFlags, EngineTarget

NAME = "engine-launch"
TARGET_AMORTISED_S = 15.0  # <= 15 s of launch per scenario, amortised


def launch_once(target: EngineTarget, flags: EngineFlags, launcher: str = "exec") -> dict[str, Any]:
    """One launch: seconds to ready, processes, seconds from SIGTERM to gone."""
    port = free_port()
    cmd = target.engine_command(port) if flags.default() else target.engine_command(port, flags)
    if launcher == "exec":
        cmd = dataclasses.replace(cmd, preload=())
    elif not cmd.preload:
        return {"error": f"{target.name} has no modules to preload", "launcher": launcher}
    with tempfile.TemporaryDirectory(prefix="lc-bench-engine-") as d:
        tree = EngineTree(cmd.argv, Path(d) / "run", ready=cmd.ready, failed=cmd.failed, env=cmd.env,
                          path_vars=cmd.path_vars, preload=cmd.preload, preload_env=cmd.preload_env)
        owners: dict[str, list[int]] = {}
        try:
            try:
                ready_s = tree.start(timeout=600.0)  # a safety net: the figure is what is measured
            except EngineStartError as exc:
                return {"error": str(exc).splitlines()[0], "launcher": launcher}
            members = tree.members()
            # the /dev/shm segments it holds (a TP=2 vLLM leaves its cpushm pair on SIGTERM), removed below
            owners = shm_owners(take("ready", root=tree.tmp, pids=[m.pid for m in members], ports=(),
                                     unix_under=tree.tmp, gpu=False), members)
            procs = len([m for m in members if m.state != "Z"])
            t0 = time.monotonic()
            tree.signal(signal.SIGTERM)
            gone = tree.wait_gone(120.0)
            return {"ready_s": round(ready_s, 3), "processes": procs, "gone": gone,
                    "stop_s": round(time.monotonic() - t0, 3), "launcher": launcher}
        finally:
            tree.close()
            remove_segments(owners)  # nothing a benchmark starts outlives it


def from_reports(dirs: list[Path]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Each stored run's launches (engine_launched, then engine_ready or engine_start_failed), by target, TP and
    launcher; and per target and launcher, the launch per scenario run, amortised."""
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    per_run: dict[tuple[str, str, str], list[float]] = {}
    for d in dirs:
        stored = [(json.loads(f.read_text()),
                   [json.loads(line) for line in (f.parent / "history.jsonl").read_text().splitlines() if line])
                  for f in sorted(d.glob("*/verdicts.json"))]
        # how the directory's library ran: chained (harness.scenario.chain: a restarted engine handed to the next
        # scenario) when any of its runs is a chained one, else each scenario alone
        chained = any(e["kind"] == "chain_item_began" for _, events in stored for e in events)
        mode = "chained" if chained else "alone"
        for doc, events in stored:
            launcher, seconds, ready = "exec", 0.0, 0
            # a chained run's scenario (harness.scenario.chain) carries the launch of the engine it was handed:
            # that launch is counted once, in the scenario that made it (its restart)
            handed = {e["data"]["pid"] for e in events if e["kind"] == "engine_handed"}
            for e in events:
                if e["kind"] == "engine_launched":
                    launcher = e["data"].get("launcher", "exec")  # a run before launchers existed exec'd
                    continue
                if e["kind"] == "engine_ready" and e["data"].get("pid") in handed:
                    continue
                if e["kind"] == "engine_ready":
                    run = {"ready_s": e["data"]["ready_s"], "processes": len(e["data"]["members"])}
                    seconds += e["data"]["ready_s"]
                    ready += 1
                elif e["kind"] == "engine_start_failed":
                    run = {"error": e["data"]["error"]}
                else:
                    continue
                run["launcher"] = launcher
                groups.setdefault((doc["variant"], int(doc["params"].get("tp", 1)), launcher), []).append(run)
            if ready or handed:  # a run none of whose launches became ready paid its bound, not a launch
                per_run.setdefault((doc["variant"], launcher, mode), []).append(seconds)
    amortised = [{"target": t, "launcher": lz, "mode": mode, "runs": len(v), "launch_s": round(sum(v), 1),
                  "per_run_s": round(sum(v) / len(v), 1), "met": sum(v) / len(v) <= TARGET_AMORTISED_S}
                 for (t, lz, mode), v in sorted(per_run.items())]
    return [summary(target, tp, runs, lz) for (target, tp, lz), runs in sorted(groups.items())], amortised


def summary(target: str, tp: int, runs: list[dict[str, Any]], launcher: str = "exec") -> dict[str, Any]:
    ok = [r for r in runs if "ready_s" in r]
    out: dict[str, Any] = {"target": target, "tp": tp, "launcher": launcher, "runs": runs,
                           "failed": len(runs) - len(ok)}
    if ok:
        ready = [r["ready_s"] for r in ok]
        out.update(ready_median_s=round(statistics.median(ready), 2), ready_min_s=round(min(ready), 2),
                   ready_max_s=round(max(ready), 2), processes=ok[0]["processes"])
        if all("stop_s" in r for r in ok):
            out["stop_median_s"] = round(statistics.median(r["stop_s"] for r in ok), 2)
    return out


def measure(target: EngineTarget, flags: EngineFlags, reps: int) -> dict[str, Any]:
    return summary(target.name, flags.tp, [launch_once(target, flags) for _ in range(reps)])


def measure_launchers(target: EngineTarget, flags: EngineFlags, reps: int) -> list[dict[str, Any]]:
    """``reps`` launches by each launcher, interleaved (exec, zygote, exec, ...): side by side on one machine."""
    runs: dict[str, list[dict[str, Any]]] = {"exec": [], "zygote": []}
    for _ in range(reps):
        for launcher, out in runs.items():
            out.append(launch_once(target, flags, launcher))
    return [summary(target.name, flags.tp, out, launcher) for launcher, out in runs.items()]


def table(result: Mapping[str, Any]) -> str:
    # the 1-minute load average when the table was written: the launches of --from-reports ran earlier, and
    # their own machine's load is the findings page's to say
    load = f"load average {result['load']} when written" if "load" in result else "shared with other work"
    lines = [f"Launches: {result['source']}; {load}:", "",
             "| target | TP | launcher | sample | processes | launches | launch to ready, median (min-max) | "
             "SIGTERM to gone, median | failed |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for m in result["targets"]:
        lz = m.get("launcher", "exec") + f" | {m.get('sample', 'these launches')}"
        if "ready_median_s" in m:
            stop = f"{m['stop_median_s']:.2f} s" if "stop_median_s" in m else "-"
            lines.append(f"| {m['target']} | {m['tp']} | {lz} | {m['processes']} | {len(m['runs'])} | "
                         f"{m['ready_median_s']:.2f} s ({m['ready_min_s']:.2f}-{m['ready_max_s']:.2f}) | {stop} | "
                         f"{m['failed']} |")
        else:
            lines.append(f"| {m['target']} | {m['tp']} | {lz} | - | {len(m['runs'])} | every launch failed: "
                         f"{m['runs'][0].get('error')} | - | {m['failed']} |")
    if result.get("amortised"):
        lines += ["", "Launch per scenario run, amortised (the launches to ready of the runs that became ready, "
                  f"summed, over those runs; target <= {TARGET_AMORTISED_S:.0f} s):", "",
                  "| target | launcher | scenarios run | runs | launch to ready, summed | per run | met |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for a in result["amortised"]:
            lines.append(f"| {a['target']} | {a['launcher']} | {a.get('mode', 'alone')} | {a['runs']} | "
                         f"{a['launch_s']:.1f} s | "
                         f"{a['per_run_s']:.1f} s | {'**yes**' if a['met'] else 'no (missed)'} |")
    lines += ["", f"Cost rule: a real-engine scenario's watchdog deadline is 60 s plus "
              f"{result['launch_bound_s']:.0f} s (the launch bound) per launch it needs.", "",
              docpage.provenance(result)]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="launches per target (default 3)")
    ap.add_argument("--tp2", action="store_true", help="also vllm_engine at TP=2")
    ap.add_argument("--from-reports", nargs="+", type=Path, metavar="DIR",
                    help="read the launches of the stored runs under DIR (and launch no vLLM, unless --live)")
    ap.add_argument("--live", action="store_true", help="with --from-reports: also launch vLLM by each launcher")
    ap.add_argument("--write", action="store_true", help="commit docs/data/engine_launch.json and the table")
    a = ap.parse_args()
    if not 1 <= a.reps <= 20:
        print("error: --reps is 1 to 20", file=sys.stderr)
        return 2
    targets = [measure(STANDIN, EngineFlags(), a.reps)]
    amortised: list[dict[str, Any]] = []
    sources = [f"the stand-in {a.reps} launch(es)"]
    if a.from_reports:
        missing = [str(d) for d in a.from_reports if not d.is_dir()]
        if missing:
            print(f"error: no such directory: {', '.join(missing)}", file=sys.stderr)
            return 2
        stored, amortised = from_reports(a.from_reports)
        targets += [dict(t, sample="stored runs") for t in stored if t["target"] == TARGET.name]
        amortised = [x for x in amortised if x["target"] == TARGET.name]
        sources.append("vLLM each launch the stored scenario runs made (sample: stored runs)")
    if a.live or not a.from_reports:
        why = TARGET.unavailable()
        if why:
            print(f"vllm_engine skipped: {why}", file=sys.stderr)
        else:
            live = measure_launchers(TARGET, EngineFlags(), a.reps)
            if a.tp2:
                live += measure_launchers(TARGET, EngineFlags(tp=2), a.reps)
            targets += [dict(t, sample="side by side") for t in live]
            sources.append(f"vLLM {a.reps} launch(es) by each launcher, one at a time, the launchers interleaved "
                           "(sample: side by side)")
    source = "; ".join(sources)
    result = {**docpage.measured(__file__, sys.argv[1:]), "load": round(os.getloadavg()[0], 1),
              "source": source, "launch_bound_s": TARGET.launch_s, "targets": targets, "amortised": amortised}
    text = table(result)
    print(text)
    if a.write:
        docpage.write(NAME, result, text)
        import targets_block

        targets_block.write()  # the README's table of the measured targets (launch per scenario, amortised)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
