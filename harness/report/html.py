"""The self-contained HTML page of one run: inline CSS and SVG, no scripts, nothing fetched.

Top to bottom: the header (scenario, matrix id, variant, outcome, a badge per
verdict, the replay and re-judge commands), problems with the history, the
SVG timeline (:mod:`harness.report.timeline`: the span that matters, the whole
run one click below it), the verdicts with their
evidence, the stacks of a hung run, exit codes, leftovers, and the compact
text timeline.  Every piece of text is escaped.  Query hooks: ``#verdicts
.verdict.<status>[data-checker]``, ``span.badge.<status>``, ``#stacks
pre.stacks[data-label]``, ``#problems li``, ``#leftovers li``, ``pre#text-timeline``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from harness.artifacts import cut, shown
from harness.checkers.base import Verdict
from harness.history import Event
from harness.launch.outcome import watchdog_words
from harness.report.timeline import MARKER_KINDS, Evidence, evidence_key, timeline_views
from harness.scenario.report import replay_command
from harness.scenario.report import timeline as text_timeline

__all__ = ["render_page", "evidence_of", "STATUSES"]

STATUSES = ("ok", "violated", "unknown")  # verdict statuses, each with a badge colour
SHOWN_FIRST = {"violated": 0, "unknown": 1, "ok": 2}  # the order of the verdict list
EVIDENCE_ROWS = 50  # evidence events listed per verdict at most
EVIDENCE_TOTAL = 2000  # evidence events listed on the page at most, every verdict together
STACKS_CHARS = 20000  # characters of one process's stacks shown at most (the tail)
# The page's size is bounded whatever the history holds: each piece below is cut, with its length shown
# (verdicts.json and the history keep everything). Its largest run page is some MiB.
TEXT_CHARS = 2000  # characters of one message, detail or header value
VALUE_CHARS = 300  # characters of one event's data in a row
KV_CHARS = TEXT_CHARS  # characters of one evidence event's data at most, every nested cell together
CELL_COST = 8  # what one cell's markup counts against KV_CHARS, so many empty cells are bounded too
KV_COLUMNS = 20  # columns of a list-of-mappings table at most
KV_DEPTH = 3  # mappings within mappings shown as nested tables this deep; deeper ones as cut text
LIST_MAX = 200  # problems, exit codes, leftovers, stacks and notes listed at most (then "... and N more")
TEXT_LINES = 2000  # lines of the text timeline at most (evidence first)
# the words of each run outcome (harness.launch.cluster.OUTCOME_STATUSES) on the page's headline
# ("hung" without the watchdog's bound: a start that hung, ended at its launch bound; with it, watchdog_words)
OUTCOME_WORDS = {"ok": "ran to the end", "hung": "hung: the harness ended it", "failed": "failed: could not start"}

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em;color:#1b1f24;background:#fff}
h1{font-size:1.3em;margin:0 0 .3em} h2{font-size:1.1em;margin:1.4em 0 .4em;border-bottom:1px solid #ddd}
code,pre{font:12px/1.35 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{background:#f6f8fa;padding:.6em;overflow:auto;max-height:40em;border:1px solid #e1e4e8}
.meta td{padding:0 1em 0 0;vertical-align:top} .meta td:first-child{color:#57606a}
.badge{display:inline-block;padding:0 .5em;margin:0 .3em .3em 0;border-radius:.8em;font-size:.9em;color:#fff}
.badge.ok{background:#1a7f37} .badge.violated{background:#cf222e} .badge.unknown{background:#9a6700}
.outcome.ok{background:#1a7f37} .outcome.hung,.outcome.failed{background:#cf222e}
.verdict{border-left:4px solid #ccc;padding:.2em .8em;margin:.5em 0} .verdict.ok{border-color:#1a7f37}
.verdict.violated{border-color:#cf222e;background:#fff5f5} .verdict.unknown{border-color:#9a6700}
table.evidence{border-collapse:collapse;font-size:12px} table.evidence td,table.evidence th{padding:1px 8px;
text-align:left;border-bottom:1px solid #eee}
.headline{font-size:1.15em;margin:.2em 0} .catch{font-weight:600;padding:.2em .6em;margin:.3em 0}
.catch.caught{background:#dafbe1;border-left:4px solid #1a7f37} .catch.missed{background:#ffebe9;
border-left:4px solid #cf222e}
table.kv{border-collapse:collapse;font-size:12px} table.kv th{color:#57606a;font-weight:normal;padding:0 6px 0 0;
vertical-align:top;text-align:left} table.kv td{padding:0 6px 0 0;vertical-align:top;border:0}
table.kv.list th{border-bottom:1px solid #ddd}
.problems{background:#fff8c5;border:1px solid #d4a72c;padding:.4em .8em}
.scroll{overflow-x:auto;border:1px solid #e1e4e8}
svg.timeline{font:11px ui-monospace,Menlo,monospace;background:#fff}
svg .lane{fill:#fff} svg .lane.odd{fill:#f6f8fa} svg .lane-label{fill:#57606a}
svg .tick{stroke:#e1e4e8} svg .tick-label{fill:#8c959f;text-anchor:middle}
svg .span{stroke-width:1;fill-opacity:.75} svg .span.frame{fill:#54aeff;stroke:#0969da}
svg .span.dispatch{fill:#4ac26b;stroke:#1a7f37} svg .span.drain{fill:#c297ff;stroke:#8250df}
svg .span.open{stroke-dasharray:3 2} svg .span.cancelled{fill:#d0d7de;stroke:#6e7781}
svg .mark.teardown_step{fill:#8250df} svg .event{fill:#8c959f}
svg .marker{stroke-width:2} svg .marker.stop_started{stroke:#bc4c00}
svg .marker.stop_returned{stroke:#0550ae} svg .marker.stop_returned.failed{stroke-dasharray:5 3}
svg .marker.fault_reached{stroke:#bf8700;stroke-dasharray:2 2} svg .marker.fault_released{stroke:#bf8700}
svg .marker.process_exited{stroke:#24292f;stroke-dasharray:1 3}
svg .marker.watchdog_fired{stroke:#cf222e;stroke-width:4}
svg .span.violation{fill:#ff8182;stroke:#cf222e;stroke-width:2} svg .marker.violation{stroke:#cf222e}
svg .event.violation,svg .mark.violation{fill:#cf222e}
svg .violation.evidence circle{fill:none;stroke:#cf222e;stroke-width:2.5}
svg .lane.engine-lane{fill:#f0f6ff} svg .lane.request-lane{fill:#fbf7ff}
svg .life{fill:#8c959f;fill-opacity:.5;stroke:#57606a} svg .life.survived{fill:#cf222e;stroke:#82071e}
svg .life.open,svg .life.survived{stroke-dasharray:4 2} svg .life.closed{fill:#bf8700}
svg .life-mark{stroke-width:2} svg .life-mark.ready{stroke:#1a7f37} svg .life-mark.signalled{stroke:#bc4c00}
svg .life-mark.exited{stroke:#24292f}
svg .request.answered{fill:#4ac26b;stroke:#1a7f37} svg .request.aborted{fill:#ffb77c;stroke:#bc4c00}
svg .request.hung{fill:#ff8182;stroke:#cf222e;stroke-dasharray:4 2} svg .request.not_sent{fill:#d0d7de}
svg :hover{opacity:.7}
.focus-note{color:#57606a;margin:.2em 0} details.whole-run{margin-top:.6em}
details.whole-run summary{cursor:pointer;color:#0969da} svg .focus-band{fill:#0969da;fill-opacity:.07}
svg .gap{fill:#eaeef2;stroke:#8c959f;stroke-dasharray:4 3}
.legend span{margin-right:1.2em;white-space:nowrap} .legend i{display:inline-block;width:1.6em;height:.7em;
margin-right:.3em;vertical-align:middle}
"""

LEGEND = (("frame read", "background:#54aeff"), ("dispatch", "background:#4ac26b"), ("drain", "background:#c297ff"),
          ("teardown step", "background:#8250df;width:.3em"), ("stop started", "border-left:3px solid #bc4c00"),
          ("stop returned", "border-left:3px solid #0550ae"),
          ("fault reached/released", "border-left:3px dotted #bf8700"),
          ("process exited", "border-left:3px dotted #24292f"), ("watchdog", "border-left:4px solid #cf222e"),
          ("violation evidence", "border:2px solid #cf222e;border-radius:1em;width:.7em"),
          ("engine process alive", "background:#8c959f"), ("survived", "background:#cf222e"),
          ("ready", "border-left:3px solid #1a7f37"), ("signal sent", "border-left:3px solid #bc4c00"),
          ("request answered", "background:#4ac26b"), ("aborted", "background:#ffb77c"),
          ("hung", "background:#ff8182"))


def evidence_of(verdicts: Sequence[Verdict]) -> Evidence:
    """Every evidence event of a non-ok verdict, by key, with (checker, message)."""
    out: Evidence = {}
    for v in verdicts:
        if v.status != "ok":
            for e in v.evidence:
                out.setdefault(evidence_key(e), []).append((v.checker, v.message))
    return out


def _h(x: object, limit: int = TEXT_CHARS) -> str:
    return escape(cut(str(x), limit), quote=True)


def _more(items: Sequence[Any] | Mapping[str, Any], what: str) -> str:
    extra = len(items) - LIST_MAX
    return f"<p class=\"more\">... and {extra} more {what}</p>" if extra > 0 else ""


def _badge(status: str, text: str, cls: str = "badge") -> str:
    safe = status if status in STATUSES or cls != "badge" else "unknown"
    return f'<span class="{cls} {_h(safe)}" data-status="{_h(status)}">{_h(text)}</span>'


def _header(doc: Mapping[str, Any], verdicts: Sequence[Verdict], history: str, run_dir: str | None) -> list[str]:
    outcome = doc.get("outcome") or {}
    status = str(outcome.get("status", "unknown"))
    name = f"{doc.get('scenario') or '(unknown scenario)'}[{doc.get('matrix') or '?'}]"
    rows = [("variant", doc.get("variant")), ("run", doc.get("run_id")), ("test", doc.get("nodeid")),
            ("seconds", f"{doc['seconds']:.2f}" if isinstance(doc.get("seconds"), int | float) else None),
            ("outcome detail", outcome.get("detail") or None)]
    if doc.get("nodeid") and run_dir is not None:  # the report holds the target and finds the scenario file
        rows.append(("replay", replay_command(run_dir)))
    rows.append(("re-judge", f"lastcall report {history}"))
    out = [f'<header><h1 data-kind="title">{_h(name)} {_badge(status, "outcome " + status, "badge outcome")}</h1>',
           *_catch_line(doc.get("catch")), _headline(verdicts, outcome), '<table class="meta">']
    out += [f'<tr data-kind="{_h(k)}"><td>{_h(k)}</td><td><code>{_h(v)}</code></td></tr>' for k, v in rows if v]
    out.append('</table><div class="verdict-badges" data-kind="badges">')
    out += [_badge(v.status, f"{v.checker}: {v.status}") for v in verdicts]
    out.append("</div></header>")
    return out


def outcome_words(outcome: Mapping[str, Any]) -> str:
    """How the run ended, in words: its status's (OUTCOME_WORDS); a hung run's with the bound its watchdog fired
    at ("hung: watchdog after 60 s"), else with its detail."""
    status = str(outcome.get("status", "unknown"))
    watchdog = outcome.get("watchdog")
    fired = watchdog_words(watchdog) if status == "hung" and isinstance(watchdog, Mapping) else ""
    if fired:
        return fired
    words = OUTCOME_WORDS.get(status, f"ended as {status!r}")
    detail = str(outcome.get("detail") or "")
    return f"hung: {detail}" if status == "hung" and detail else words


def verdict_words(verdicts: Sequence[Verdict]) -> str:
    """The verdicts in a few words: "3 violated, 1 unknown", "all 12 ok", or "no checker was run"."""
    if not verdicts:
        return "no checker was run"
    counts = {s: sum(v.status == s for v in verdicts) for s in ("violated", "unknown", "ok")}
    if counts["ok"] == len(verdicts):
        return f"all {len(verdicts)} ok"
    return ", ".join(f"{n} {s}" for s, n in counts.items() if n and s != "ok")


def _headline(verdicts: Sequence[Verdict], outcome: Mapping[str, Any]) -> str:
    return (f'<p class="headline" data-kind="headline"><b data-kind="verdict-words">{_h(verdict_words(verdicts))}'
            f'</b>; the run <span data-kind="outcome-words">{_h(outcome_words(outcome))}</span></p>')


def _catch_line(catch: Any) -> list[str]:
    """A catches item's line: whether the planted bug was caught, so why the item passed or failed."""
    if not isinstance(catch, Mapping):
        return []
    by = ", ".join(str(c) for c in (catch.get("by") or [])[:LIST_MAX])
    if catch.get("counted"):
        text, cls = f"expected to be caught: caught by {by}, so this item passed", "caught"
    else:
        checkers = ", ".join(str(c) for c in (catch.get("checkers") or [])[:LIST_MAX])
        text, cls = f"expected to be caught by {checkers}: not caught, so this item failed", "missed"
    bug = f" (planted bug {catch['bug']})" if catch.get("bug") else ""
    why = "" if catch.get("counted") else f'<br><small>{_h(catch.get("why") or "")}</small>'
    return [f'<p class="catch {cls}" data-kind="catch" data-counted="{str(bool(catch.get("counted"))).lower()}">'
            f"{_h(text + bug)}{why}</p>"]


def _problems(problems: Sequence[str], step_error: str, broken: str = "") -> list[str]:
    out = []
    if broken:
        out.append(f'<section id="broken" class="problems"><b>the run is broken, so nothing it shows counts:</b> '
                   f"<code>{_h(broken)}</code></section>")
    if problems:
        out.append(f'<section id="problems" class="problems"><b>{len(problems)} line'
                   f'{"" if len(problems) == 1 else "s"} of the history could not be read</b>; '
                   "the verdicts are judged on what could be read:<ul>")
        out += [f"<li>{_h(p)}</li>" for p in problems[:LIST_MAX]]
        out.append(f"</ul>{_more(problems, 'lines')}</section>")
    if step_error:
        out.append(f'<section id="step-error" class="problems"><b>a step failed:</b> <code>{_h(step_error)}</code>'
                   "</section>")
    return out


class _Budget:
    """The characters one event's data may still show (KV_CHARS, each cell's markup counted as CELL_COST), so
    a page stays bounded whatever the history holds: once spent, each table stops at the row it is on and says
    how many it left out."""

    def __init__(self) -> None:
        self.left = KV_CHARS

    def cell(self, x: object) -> str:
        text = shown(x, max(1, min(VALUE_CHARS, self.left)))
        self.left -= len(text) + CELL_COST
        return escape(text, quote=True)


def _left(n: int, what: str) -> str:
    return f'<span class="more">... and {n} more {what}</span>' if n > 0 else ""


def _kv(value: object, b: _Budget, depth: int = 0) -> str:
    """``value`` as a person reads it: a mapping as a key/value table, a list of mappings as a table with a
    column per key, another list one item a line; every scalar through shown() and escaped.  A mapping or
    list deeper than KV_DEPTH is named with its size, never written out as its repr."""
    if not isinstance(value, Mapping | list | tuple):
        return f"<code>{b.cell(value)}</code>"
    if depth >= KV_DEPTH:
        what = f"a mapping of {len(value)} keys" if isinstance(value, Mapping) else f"a list of {len(value)} items"
        return f'<i class="deep">({b.cell(what)}, nested too deep to show)</i>'
    if isinstance(value, Mapping):
        return _kv_mapping(value, b, depth)
    items = value[:LIST_MAX]
    if items and all(isinstance(x, Mapping) for x in items):
        return _kv_rows(value, b, depth)
    lines = []
    for x in items:
        if b.left <= 0:
            break
        lines.append(f"<div>{_kv(x, b, depth + 1)}</div>")
    return "".join(lines) + _left(len(value) - len(lines), "items")


def _kv_mapping(value: Mapping[Any, Any], b: _Budget, depth: int) -> str:
    rows = []
    for k, v in itertools.islice(value.items(), LIST_MAX):
        if b.left <= 0:
            break
        rows.append(f"<tr><th>{b.cell(k)}</th><td>{_kv(v, b, depth + 1)}</td></tr>")
    return f'<table class="kv">{"".join(rows)}</table>{_left(len(value) - len(rows), "keys")}'


def _kv_rows(value: Sequence[Mapping[Any, Any]], b: _Budget, depth: int) -> str:
    """A list of mappings (the survivors of a tree, the sockets of a process): a row each, a column per key."""
    keys: dict[Any, None] = {}
    for x in value[:LIST_MAX]:
        keys.update(dict.fromkeys(x))
    cols = list(keys)[:KV_COLUMNS]
    head = "".join(f"<th>{b.cell(c)}</th>" for c in cols)
    if len(keys) > len(cols):
        head += f"<th>{_left(len(keys) - len(cols), 'columns')}</th>"
    rows = []
    for x in value[:LIST_MAX]:
        if b.left <= 0:
            break
        rows.append("<tr>" + "".join(f"<td>{_kv(x[c], b, depth + 1) if c in x else ''}</td>" for c in cols)
                    + "</tr>")
    return f'<table class="kv list"><tr>{head}</tr>{"".join(rows)}</table>{_left(len(value) - len(rows), "items")}'


def _event_row(e: Event, t0: int) -> str:
    data = {k: v for k, v in e.data.items() if k != "text"}
    return (f'<tr data-kind="{_h(e.kind)}"><td>{(e.t_ns - t0) / 1e6:.3f} ms</td><td>{_h(e.rank or e.role, 200)} '
            f"[{e.pid}]</td><td>{_h(e.thread, 200)}</td><td><b>{_h(e.kind)}</b></td>"
            f'<td class="data">{_kv(data, _Budget())}</td></tr>')


def _verdicts(verdicts: Sequence[Verdict], t0: int) -> list[str]:
    out = ['<section id="verdicts"><h2>Verdicts</h2>']
    if not verdicts:
        out.append("<p>(no checker was run)</p>")
    rows = EVIDENCE_TOTAL
    for v in sorted(verdicts, key=lambda v: SHOWN_FIRST.get(v.status, 1)):
        out.append(f'<div class="verdict {_h(v.status)}" data-checker="{_h(v.checker)}" data-status="{_h(v.status)}">'
                   f"<h3>{_badge(v.status, v.status)} {_h(v.checker)}</h3><p>{_h(v.message)}</p>")
        if v.evidence:
            out.append('<table class="evidence"><tr><th>time</th><th>process</th><th>thread</th><th>event</th>'
                       "<th>data</th></tr>")
            listed = v.evidence[:max(0, min(EVIDENCE_ROWS, rows))]
            rows -= len(listed)
            out += [_event_row(e, t0) for e in listed]
            out.append("</table>")
            if len(v.evidence) > len(listed):
                out.append(f"<p>... and {len(v.evidence) - len(listed)} more evidence events</p>")
        out += [f'<pre class="notes">{_h(n, STACKS_CHARS)}</pre>' for n in v.notes[:3]]
        out.append("</div>")
    out.append("</section>")
    return out


def _outcome(outcome: Mapping[str, Any]) -> list[str]:
    out = []
    stacks = outcome.get("stacks") or {}
    if stacks:
        out.append(f'<section id="stacks"><h2>Stacks ({_h(outcome.get("status", "?"))} run: the watchdog took '
                   "these before killing the processes)</h2>")
        for label, text in list(stacks.items())[:LIST_MAX]:
            out.append(f'<h3>{_h(label, 200)}</h3><pre class="stacks" data-label="{_h(label, 200)}">'
                       f"{_h(str(text)[-STACKS_CHARS:])}</pre>")
        out.append(f"{_more(stacks, 'processes')}</section>")
    exits = outcome.get("exits") or {}
    if exits:
        out.append('<section id="exits"><h2>Exit codes</h2><table class="evidence">')
        out += [f'<tr data-label="{_h(k, 200)}"><td>{_h(k, 200)}</td><td>{_h(v, 200)}</td></tr>'
                for k, v in list(exits.items())[:LIST_MAX]]
        out.append(f"</table>{_more(exits, 'processes')}</section>")
    left = outcome.get("leftovers") or []
    if left:
        out.append('<section id="leftovers"><h2>Leftovers (found before the harness removed them)</h2><ul>')
        out += [f"<li>{_h(x)}</li>" for x in left[:LIST_MAX]]
        out.append(f"</ul>{_more(left, 'leftovers')}</section>")
    return out


def render_page(doc: Mapping[str, Any], verdicts: Sequence[Verdict], events: Sequence[Event],
                problems: Sequence[str] = (), history: str = "history.jsonl", run_dir: str | None = None) -> str:
    """The whole page.  ``doc`` is the run's verdicts.json content (scenario, matrix, variant, run_id, nodeid,
    outcome, step_error, seconds); any of it may be missing (a bare history). ``run_dir``: the directory the page
    is written in, which its replay command names (none without it)."""
    evs = sorted(events, key=lambda e: e.t_ns)
    t0 = evs[0].t_ns if evs else 0
    ev = evidence_of(verdicts)
    marked = {id(e) for e in evs if evidence_key(e) in ev}
    title = f"lastcall: {doc.get('scenario') or 'run'}[{doc.get('matrix') or '?'}]"
    legend = "".join(f'<span><i style="{style}"></i>{_h(text)}</span>' for text, style in LEGEND)
    body = [*_header(doc, verdicts, history, run_dir), *_problems(problems, str(doc.get("step_error") or ""),
                                                             str(doc.get("broken") or "")),
            f'<section id="timeline"><h2>Timeline ({len(evs)} events; markers: {", ".join(MARKER_KINDS)})</h2>',
            f'<p class="legend">{legend}</p>', timeline_views(evs, ev), "</section>",
            *_verdicts(verdicts, t0), *_outcome(doc.get("outcome") or {}),
            '<section id="text"><h2>Text timeline</h2><pre id="text-timeline">'
            f"{escape(text_timeline(list(evs), marked, limit=min(TEXT_LINES, max(60, len(evs)))))}</pre></section>"]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_h(title)}</title><style>{CSS}</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n")
