"""What a failing scenario prints: the violated invariants, their evidence, a compact timeline, the replay."""

from __future__ import annotations

import os
import shlex
from typing import Any

from harness.artifacts import cut
from harness.checkers.index import frozen
from harness.history import Event
from harness.launch.outcome import watchdog_reason

NOISE = {"fault_armed", "process_resources", "listener_started", "stop_all_returned", "teardown_step",
         "exit_hook_started", "exit_hook_finished", "step_started"}  # left out of the compact timeline
TIMELINE_MAX = 60  # events shown at most; evidence events first
REPLAY = "lastcall replay"  # the command a report's replay line runs
BRIEF_CHARS = 120  # characters of one value on a timeline line (a padded id is cut, its length shown)


def _brief(e: Event) -> str:
    keep = {k: v for k, v in e.data.items() if k in ("listener", "conn", "cmd", "id", "ok", "reason", "step", "kind",
                                                     "site", "status", "value", "error", "why", "fault", "n")}
    return " ".join(f"{k}={cut(str(v), BRIEF_CHARS)}" for k, v in keep.items())


def timeline(events: list[Event], evidence: set[int] | None = None, limit: int = TIMELINE_MAX) -> str:
    """One line per event: ms since the first, who, what. Evidence lines start with '>>'."""
    evs = sorted(events, key=lambda e: e.t_ns)
    if not evs:
        return "(no events)"
    t0 = evs[0].t_ns
    marked = evidence or set()
    shown = [e for e in evs if e.kind not in NOISE or id(e) in marked]
    if len(shown) > limit:  # the evidence first, then the last of the rest
        head = [e for e in shown if id(e) in marked][:limit]
        room = limit - len(head)
        rest = [e for e in shown if id(e) not in marked][-room:] if room else []
        shown = sorted(head + rest, key=lambda e: e.t_ns)
    lines = []
    for e in shown:
        who = cut(e.rank or e.role, 40)
        flag = ">>" if id(e) in marked else "  "
        lines.append(f"{flag} {(e.t_ns - t0) / 1e6:9.3f} ms  {who:<11} {e.kind:<22} {_brief(e)}")
    return "\n".join(lines)


def _equal_to(events: list[Event], evidence: list[Event]) -> set[int]:
    """The ids of the events equal to an evidence event: each looked up by its value's key (its fields, its data
    frozen), so the cost is the events' and the evidence's size, not their product."""
    by_value: dict[object, list[Event]] = {}
    for y in evidence:
        by_value.setdefault(_value_key(y), []).append(y)
    return {id(x) for x in events if any(x == y for y in by_value.get(_value_key(x), ()))}


def _value_key(e: Event) -> object:
    """A key equal for equal events: all its fields, its data frozen (only its place and kind where the data holds
    a value no key can: then equality decides among those)."""
    try:
        key = (e.t_ns, e.pid, e.role, e.rank, e.thread, e.kind, frozen(e.data), e.v)
        hash(key)
    except TypeError:
        return (e.t_ns, e.pid, e.kind)
    return key


def replay_command(run_dir: str | os.PathLike[str] | None, file: str | None = None, name: str = "",
                   target: str | None = None) -> str:
    """The command that reruns a test from any directory: ``lastcall replay RUN_DIR`` of its report (the
    directory's absolute path; the report holds the target), else (reports off) ``lastcall run FILE::NAME`` of
    its scenario file's absolute path, with the session's target override."""
    if run_dir is not None:
        return f"{REPLAY} {shlex.quote(os.path.abspath(run_dir))}"
    item = f"{os.path.abspath(file or '')}::{name}"
    return f"lastcall run {shlex.quote(item)}" + (f" --target {shlex.quote(target)}" if target else "")


def failure_text(result: Any, nodeid: str | None = None, page: Any = None, target: str | None = None) -> str:
    """The report of one run, for pytest's failure output and the terminal (``page``: its HTML report;
    ``target``: the session's target override, which the replay needs when there is no report: the node id alone
    runs the file's). Its replay line works from any directory (:func:`replay_command`)."""
    # a hung run's first line (pytest's short summary shows it) says the watchdog ended it, after how long and why
    fired = watchdog_reason(result.outcome.watchdog) if result.outcome.status == "hung" else ""
    out = [f"scenario {result.item.scenario.name}[{result.item.id}] on {result.variant}: "
           f"{fired or 'outcome ' + result.outcome.status}, {result.seconds:.2f}s, run {result.run_id}"]
    if getattr(result, "broken", ""):
        out.append(f"broken: {result.broken} (nothing this run shows counts)")
    if result.step_error:
        out.append(f"step failed: {result.step_error}")
    shown: list[Event] = []
    for v in result.verdicts:
        if v.status != "ok":
            out.append(f"  {v.status.upper()} {v.checker}: {v.message}")
            for e in v.evidence[:8]:
                out.append(f"      evidence: {e.kind} {e.rank or e.role} {_brief(e)}")
            shown += v.evidence
    evidence = _equal_to(result.events, shown)
    for v in result.verdicts:
        if v.status == "ok":
            out.append(f"  ok {v.checker}: {v.message}" if v.message else f"  ok {v.checker}")
    if result.outcome.stacks:
        for label, text in result.outcome.stacks.items():
            out.append(f"--- stacks of {label} ---\n{text[-3000:]}")
    out.append("timeline:")
    out.append(timeline(result.events, evidence))
    run_dir = None
    if page:
        out.append(f"report: {page}")
        run_dir = os.path.dirname(page) if str(page).endswith(".html") else str(page)
        out.append(f"re-judge: lastcall report {os.path.join(run_dir, 'history.jsonl')}")
    source = result.item.scenario.source
    if nodeid and (run_dir is not None or source is not None):
        out.append(f"replay: {replay_command(run_dir, source, nodeid.rpartition('::')[2], target)}")
    return "\n".join(out)
