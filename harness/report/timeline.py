"""The inline SVG timeline of one run, in two views.

x is time in ms from the first event; there is one lane per (process, thread).
:func:`timeline_views` opens on the span that matters, ``svg.timeline.focus``
(:func:`focus`: from the first fault, stop or kill to the last event of the
stop, and every violation's evidence, padded; a hung run's, :func:`hang`: from
its last progress to the watchdog firing, the silence between drawn as a break,
``rect.gap``), with the whole run,
``svg.timeline.whole``, one click away in a ``<details>`` below it: plain HTML,
no script.  A run whose stop takes most of it has the whole view only.  Each
view carries ``data-view``, ``data-t0-ms`` and ``data-t1-ms`` (its axis, in ms
of the run) and ``data-run-ms``; times in tooltips and ``data-t-ms`` are ms of
the run in both views.

What is drawn, and how a test or a browser finds it (every element has a
``class`` and a ``data-kind``; each carries a ``<title>`` tooltip with its
event and time; the focus view draws what falls inside its span, a span
that crosses an edge cut at it):

* ``rect.lane`` / ``text.lane-label``: the lanes (``data-process``, ``data-thread``).
* ``rect.focus-band``: on the whole view, the span the focus view shows.
* ``rect.span.frame`` (frame_started -> frame_completed, per connection),
  ``rect.span.dispatch`` (dispatch_started -> dispatch_finished, per
  connection), ``rect.span.drain`` (drain_started -> drain_finished); a span
  never closed also has ``open``, a frame closed by ``connection_closed``
  instead has ``cancelled``.
* ``rect.mark.teardown_step`` (``data-step``): a tick per teardown step.
* ``line.marker.<kind>`` for stop_started, stop_returned (with ``ok`` or
  ``failed`` and ``data-ok``), fault_reached, fault_released, process_exited
  and watchdog_fired: across the lanes of their process (watchdog: all).
* ``circle.event``: every other event, small and grey.
* an engine run's lanes below the rest: a lane per process of the tree with its life, and a bar per request
  (:mod:`harness.report.engine_lanes`).
* ``g.violation.evidence`` (``data-kind`` the event's kind, ``data-checker``):
  a red ring on each evidence event of a violated verdict, titled with the
  checker's message; the span or marker it belongs to also gets ``violation``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from html import escape
from itertools import islice

from harness.artifacts import cut
from harness.categories import category_of
from harness.history import Event
from harness.report.engine_lanes import Axis, draw_engine, engine_rows

__all__ = ["svg_timeline", "timeline_views", "focus", "hang", "Evidence", "evidence_key", "MARKER_KINDS", "SPANS",
           "FOCUS_MAX"]

LABEL_W = 300  # px: the lane-label column
PLOT_W = 1100  # px: the time axis
LANE_H = 24  # px: one lane
BANDS = {"frame": (3, 8), "dispatch": (12, 9), "drain": (3, 18)}  # span kind -> (px from lane top, height):
# a frame being read and a dispatch on the same thread overlap in time, so they sit one above the other
TOP = 28  # px: room above the lanes for the axis labels
BOTTOM = 8  # px: room below the last lane
MIN_SPAN_W = 2.0  # px: a span shorter than this is still visible
MAX_TICKS = 12  # axis ticks at most
MARKER_KINDS = ("stop_started", "stop_returned", "fault_reached", "fault_released", "process_exited",
                "watchdog_fired")
GLOBAL_MARKERS = ("watchdog_fired",)  # drawn across every lane, not only their process's
SPANS = {"frame": ("frame_started", "frame_completed"), "dispatch": ("dispatch_started", "dispatch_finished"),
         "drain": ("drain_started", "drain_finished")}  # span kind -> (opening event, closing event)
DATA_SHOWN = 6  # data keys shown in a tooltip at most
STOPPING = ("stop", "exit", "signal")  # step categories (harness.categories) that end something: stop, kill
OPENING = ("fault_reached", "stop_started")  # with a stopping step_started: where the focus begins
CLOSING = ("stop_returned", "second_stop_returned", "stop_all_returned", "stop_from_handler_returned",
           "drain_finished", "teardown_step", "fault_released", "watchdog_fired")  # the stop's own events
FOCUS_PAD = 0.1  # of the focus span, on each side
FOCUS_MIN_PAD_NS = 200_000  # a focus on one instant still shows a little around it
FOCUS_MAX = 0.75  # of the run: a focus wider than this is no focus (the whole view only)
GAP_W = 60  # px: a hung run's silence (its last progress to the watchdog) drawn as a break of the axis
HANG_GAP = 0.5  # of a hung run's span: a silence longer than this is drawn as a break, not to scale
LABEL_CHARS = 46  # characters of a lane label at most (the column is LABEL_W wide)
MAX_LANES = 200  # lanes drawn at most: a run has a few dozen; the rest share one, "other lanes"
MAX_DRAWN = 4000  # spans, points and markers drawn in one view at most (evidence rings always): the page's size
VALUE_CHARS = 120  # characters of one data value in a tooltip at most (its length is shown; the history keeps it)

Window = tuple[int, int]  # (t_ns from, to): a view's span
Key = tuple[int, int, str, str]  # (t_ns, pid, kind, thread): how an evidence event is found in the history
Evidence = dict[Key, list[tuple[str, str]]]  # event key -> [(checker, message)]


def evidence_key(e: Event) -> Key:
    return (e.t_ns, e.pid, e.kind, e.thread)


def _process(e: Event) -> tuple[int, str]:
    return (e.pid, e.rank or e.role)


@dataclass
class _Layout:
    t0: int  # the axis: from t0 to t1 (the whole run, or the focus span)
    t1: int
    origin: int  # the run's first event: times are shown in ms from it
    end: int  # the run's last event: where a span never closed ends
    lanes: dict[tuple[int, str, str], int] = field(default_factory=dict)  # (pid, label, thread) -> index
    groups: dict[tuple[int, str], list[int]] = field(default_factory=dict)  # process -> its lane indexes
    hidden: int = 0  # lanes past MAX_LANES: their events are drawn on the last lane, "other lanes"
    gap: tuple[int, int] | None = None  # a stretch with no event drawn GAP_W px wide, not to scale (a hang)
    extra: int = 0  # the engine's lanes below them (harness.report.engine_lanes)

    def x(self, t_ns: int) -> float:
        t = min(max(t_ns, self.t0), self.t1)
        if self.gap is None:
            return LABEL_W + (t - self.t0) / max(1, self.t1 - self.t0) * PLOT_W
        g0, g1 = self.gap
        per = (PLOT_W - GAP_W) / max(1, (self.t1 - self.t0) - (g1 - g0))  # px per ns, on either side of the gap
        left = LABEL_W + (min(t, g0) - self.t0) * per
        return left if t <= g0 else left + GAP_W * min(1.0, (t - g0) / max(1, g1 - g0)) + max(0, t - g1) * per

    def shows(self, t_ns: int) -> bool:
        return self.t0 <= t_ns <= self.t1

    def y(self, lane: int) -> float:
        return TOP + lane * LANE_H

    def lane(self, e: Event) -> int:
        pid, label = _process(e)
        found = self.lanes.get((pid, label, e.thread))
        if found is not None:
            return found
        group = self.groups.get((pid, label))
        return group[0] if group else self.count - 1  # a lane past MAX_LANES: the "other lanes" lane

    def rows(self, e: Event) -> tuple[int, int]:
        """The first and last lane of ``e``'s process (every lane for a global marker)."""
        if e.kind in GLOBAL_MARKERS:
            return 0, self.count - 1
        group = self.groups.get(_process(e))
        return (group[0], group[-1]) if group else (self.lane(e), self.lane(e))

    @property
    def count(self) -> int:
        """Lanes drawn: one per (process, thread) up to MAX_LANES, and one for the rest."""
        return len(self.lanes) + (1 if self.hidden else 0) + self.extra

    @property
    def height(self) -> float:
        return TOP + self.count * LANE_H + BOTTOM


def _layout(events: Sequence[Event], window: tuple[int, int] | None, gap: tuple[int, int] | None = None) -> _Layout:
    first, last = events[0].t_ns, events[-1].t_ns
    t0, t1 = window if window is not None else (first, last)
    lay = _Layout(t0, t1, first, last, gap=gap)
    by_process: dict[tuple[int, str], list[str]] = {}  # process -> its threads, each in order of its first event
    seen: set[tuple[int, str, str]] = set()
    threadless: list[tuple[int, str]] = []
    for e in events:
        proc = _process(e)
        if not e.thread:
            threadless.append(proc)
            continue
        if (*proc, e.thread) not in seen:
            seen.add((*proc, e.thread))
            by_process.setdefault(proc, []).append(e.thread)
    for proc in threadless:  # process_exited and the like: on the process's first lane, or a lane of its own
        by_process.setdefault(proc, [""])
    # processes in order of their first event, each process's threads together: lanes past MAX_LANES share one
    for proc, threads in by_process.items():
        for thread in threads:
            if len(lay.lanes) < MAX_LANES:
                lay.lanes[(*proc, thread)] = len(lay.lanes)
                lay.groups.setdefault(proc, []).append(lay.lanes[(*proc, thread)])
            else:
                lay.hidden += 1
    return lay


def _ms(lay: _Layout, t_ns: int) -> str:
    return f"{(t_ns - lay.origin) / 1e6:.3f}"


def _tip(lay: _Layout, e: Event, extra: str = "") -> str:
    data = ", ".join(f"{cut(str(k), 40)}={cut(str(v), VALUE_CHARS)}" for k, v in list(e.data.items())[:DATA_SHOWN]
                     if k != "text")
    who = cut(f"{e.rank or e.role} pid {e.pid} {e.thread}".strip(), VALUE_CHARS)
    return f"{e.kind} @ {_ms(lay, e.t_ns)} ms, {who}" + (f": {data}" if data else "") + extra


def _blame(ev: Evidence, *events: Event | None) -> tuple[str, str]:
    """(' violation', tooltip suffix) when one of ``events`` is evidence, else ('', '')."""
    hits = [h for e in events if e is not None for h in ev.get(evidence_key(e), [])]
    if not hits:
        return "", ""
    return " violation", "".join(f"\nVIOLATED {c}: {m}" for c, m in hits)


def _attr(**kw: object) -> str:
    return " ".join(f'{k.replace("_", "-")}="{escape(cut(str(v), VALUE_CHARS), quote=True)}"'
                    for k, v in kw.items() if v is not None)


def _data_of(e: Event) -> dict[str, object]:
    return {"data_listener": e.data.get("listener"), "data_conn": e.data.get("conn"), "data_pid": e.pid,
            "data_thread": e.thread}


_Span = tuple[str, Event, Event | None, str]  # kind, opening event, closing event (None: never closed), state


def _spans(events: Sequence[Event]) -> tuple[list[_Span], set[int]]:
    """The spans, and the ids of the events they are drawn from (the rest are drawn as points); one pass."""
    out: list[_Span] = []
    used: set[int] = set()
    closing = {end: kind for kind, (_, end) in SPANS.items()}
    opening = {start: kind for kind, (start, _) in SPANS.items()}
    live: dict[tuple[str, int, str, object], deque[Event]] = {}
    for e in events:
        kind = opening.get(e.kind) or closing.get(e.kind)
        if kind is not None:
            key = (kind, e.pid, str(e.data.get("listener", e.rank)), None if kind == "drain" else e.data.get("conn"))
            if e.kind in opening:
                live.setdefault(key, deque()).append(e)
            elif live.get(key):
                start = live[key].popleft()
                out.append((kind, start, e, ""))
                used |= {id(start), id(e)}
        elif e.kind == "connection_closed":  # a frame still being read is cancelled by the close
            key = ("frame", e.pid, str(e.data.get("listener", e.rank)), e.data.get("conn"))
            for start in live.pop(key, ()):
                out.append(("frame", start, e, " cancelled"))
                used.add(id(start))
    for starts in live.values():
        for start in starts:
            out.append((opening[start.kind], start, None, " open"))
            used.add(id(start))
    return out, used


def _overlaps(lay: _Layout, start: Event, end: Event | None) -> bool:
    return not ((end.t_ns if end is not None else lay.end) < lay.t0 or start.t_ns > lay.t1)


def _span(lay: _Layout, kind: str, start: Event, end: Event | None, state: str, ev: Evidence) -> str:
    t_end = end.t_ns if end is not None else lay.end
    if not _overlaps(lay, start, end):
        return ""  # outside the view
    x0, x1 = lay.x(start.t_ns), lay.x(t_end)
    top, height = BANDS[kind]
    y = lay.y(lay.lane(start)) + top
    bad, why = _blame(ev, start, end)
    took = f"\n{(t_end - start.t_ns) / 1e6:.3f} ms" + ("" if end is None else f", until {end.kind}")
    extra = {"data_cmd": start.data.get("cmd"), "data_ok": end.data.get("ok") if end is not None else None}
    return (f'<rect class="span {kind}{state}{bad}" {_attr(data_kind=kind, data_t_ms=_ms(lay, start.t_ns))} '
            f'{_attr(data_t_end_ms=_ms(lay, t_end), **_data_of(start), **extra)} x="{x0:.1f}" y="{y:.1f}" '
            f'width="{max(MIN_SPAN_W, x1 - x0):.1f}" height="{height}">'
            f"<title>{escape(kind + ': ' + _tip(lay, start) + took + why)}</title></rect>")


def _marker(lay: _Layout, e: Event, ev: Evidence) -> str:
    if not lay.shows(e.t_ns):
        return ""
    x = lay.x(e.t_ns)
    first, last = lay.rows(e)
    y0, y1 = lay.y(first), lay.y(last + 1)
    state, ok = "", None
    if e.kind == "stop_returned":
        ok = bool(e.data.get("ok"))
        state = " ok" if ok else " failed"
    bad, why = _blame(ev, e)
    return (f'<line class="marker {e.kind}{state}{bad}" {_attr(data_kind=e.kind, data_t_ms=_ms(lay, e.t_ns))} '
            f'{_attr(data_ok=None if ok is None else str(ok).lower(), data_site=e.data.get("site"), **_data_of(e))} '
            f'x1="{x:.1f}" x2="{x:.1f}" y1="{y0:.1f}" y2="{y1:.1f}"><title>{escape(_tip(lay, e) + why)}</title></line>')


def _point(lay: _Layout, e: Event, ev: Evidence) -> str:
    if not lay.shows(e.t_ns):
        return ""
    x, y = lay.x(e.t_ns), lay.y(lay.lane(e)) + LANE_H / 2
    bad, why = _blame(ev, e)
    if e.kind == "teardown_step":
        return (f'<rect class="mark teardown_step{bad}" {_attr(data_kind=e.kind, data_t_ms=_ms(lay, e.t_ns))} '
                f'{_attr(data_step=e.data.get("step"), **_data_of(e))} x="{x - 1.5:.1f}" y="{y - 7:.1f}" '
                f'width="3" height="14"><title>{escape(_tip(lay, e) + why)}</title></rect>')
    return (f'<circle class="event{bad}" {_attr(data_kind=e.kind, data_t_ms=_ms(lay, e.t_ns), **_data_of(e))} '
            f'cx="{x:.1f}" cy="{y:.1f}" r="2.5"><title>{escape(_tip(lay, e) + why)}</title></circle>')


def _evidence(lay: _Layout, events: Sequence[Event], ev: Evidence) -> Iterator[str]:
    for e in events:
        for checker, message in ev.get(evidence_key(e), []) if lay.shows(e.t_ns) else []:
            x, y = lay.x(e.t_ns), lay.y(lay.lane(e)) + LANE_H / 2
            yield (f'<g class="violation evidence" {_attr(data_kind=e.kind, data_checker=checker)} '
                   f'{_attr(data_t_ms=_ms(lay, e.t_ns), **_data_of(e))}>'
                   f'<circle cx="{x:.1f}" cy="{y:.1f}" r="6"/>'
                   f"<title>{escape(cut(f'VIOLATED {checker}: {message}', 1000) + chr(10) + _tip(lay, e))}"
                   "</title></g>")


def _tick_step(span_ms: float) -> float:
    raw = span_ms / MAX_TICKS
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)


def _axis(lay: _Layout) -> list[str]:
    """Ticks at round ms of the run (not of the view) across the view's span, on either side of its gap."""
    ends = [lay.t0, *(lay.gap or ()), lay.t1]
    segments = [((a - lay.origin) / 1e6, (b - lay.origin) / 1e6) for a, b in zip(ends[::2], ends[1::2], strict=True)]
    shown = sum(hi - lo for lo, hi in segments)
    step = _tick_step(shown) if shown > 0 else 1.0
    out = []
    for lo, hi in segments:
        n = math.ceil(lo / step - 1e-9)
        while n * step <= hi + 1e-9:
            ms = round(n * step, 9)
            x = lay.x(lay.origin + round(ms * 1e6))
            out.append(f'<line class="tick" data-kind="tick" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP - 4}" '
                       f'y2="{lay.height - BOTTOM:.1f}"/><text class="tick-label" data-ms="{ms:g}" x="{x:.1f}" '
                       f'y="{TOP - 8}">{ms:g} ms</text>')
            n += 1
    if lay.gap is not None:
        x0, (g0, g1) = lay.x(lay.gap[0]), lay.gap
        out.append(f'<rect class="gap" data-kind="gap" {_attr(data_t_ms=_ms(lay, g0), data_t_end_ms=_ms(lay, g1))} '
                   f'x="{x0:.1f}" y="{TOP}" width="{GAP_W}" height="{lay.height - TOP - BOTTOM:.1f}"><title>'
                   f"{(g1 - g0) / 1e6:.1f} ms without an event, drawn {GAP_W} px wide, not to scale</title></rect>")
    return out


def _lanes(lay: _Layout) -> list[str]:
    out = []
    rows: list[tuple[str, str, str]] = [
        (_attr(data_kind="lane", data_process=label, data_pid=pid, data_thread=thread or "(process)"),
         f"{label} [{pid}] {thread or '(process)'}", "") for (pid, label, thread) in lay.lanes]
    if lay.hidden:
        rows.append((_attr(data_kind="lane", data_process="(other lanes)", data_lanes=lay.hidden),
                     f"{lay.hidden} other lanes (over {MAX_LANES})", " other"))
    for i, (attrs, name, extra) in enumerate(rows):
        y = lay.y(i)
        cls = ("lane odd" if i % 2 else "lane") + extra
        out.append(f'<rect class="{cls}" {attrs} x="0" y="{y}" width="{LABEL_W + PLOT_W + 10}" height="{LANE_H}"/>'
                   f'<text class="lane-label" {attrs} x="4" y="{y + LANE_H - 6}">{escape(name[:LABEL_CHARS])}</text>')
    return out


def svg_timeline(events: Sequence[Event], evidence: Evidence | None = None,
                 window: tuple[int, int] | None = None, band: tuple[int, int] | None = None,
                 gap: tuple[int, int] | None = None) -> str:
    """The inline ``<svg class="timeline">`` of ``events``, on the axis ``window`` (t_ns from, to; default the
    whole run: ``whole``, else ``focus``), with ``band`` (the focus, on the whole view) shaded as
    ``rect.focus-band`` and ``gap`` (no event in it) drawn as ``rect.gap``; a note instead when there are none."""
    evs = sorted(events, key=lambda e: e.t_ns)
    if not evs:
        return '<p class="empty-timeline">(no events: nothing to draw)</p>'
    ev = evidence or {}
    lay = _layout(evs, window, gap)
    view = "whole" if window is None else "focus"
    spans, used = _spans(evs)
    engine = engine_rows(evs)
    first = lay.count
    lay.extra = engine.lanes
    axis = Axis(lay.x, lay.y, lambda t: _ms(lay, t), lay.t0, lay.t1, lay.end, LANE_H, LABEL_W + PLOT_W + 10)
    parts = _lanes(lay) + draw_engine(engine, axis, first) + _axis(lay)
    if band is not None:
        x0, x1 = lay.x(band[0]), lay.x(band[1])
        parts.append(f'<rect class="focus-band" data-kind="focus-band" x="{x0:.1f}" y="{TOP}" width="{x1 - x0:.1f}" '
                     f'height="{lay.height - TOP - BOTTOM:.1f}"><title>the span the page opens on: '
                     f"{_ms(lay, band[0])} to {_ms(lay, band[1])} ms</title></rect>")
    # at most MAX_DRAWN shapes, markers first, then spans, then the other events: a bounded page
    markers = _first(MAX_DRAWN, (_marker(lay, e, ev) for e in evs if e.kind in MARKER_KINDS))
    drawn = _first(MAX_DRAWN - len(markers), (_span(lay, *sp, ev) for sp in spans))
    points = _first(MAX_DRAWN - len(markers) - len(drawn),
                    (_point(lay, e, ev) for e in evs if id(e) not in used and e.kind not in MARKER_KINDS))
    rings = _first(MAX_DRAWN, _evidence(lay, evs, ev))
    parts += ['<g class="spans">', *drawn, "</g>", '<g class="events">', *points, "</g>",
              '<g class="markers">', *markers, "</g>", '<g class="violations">', *rings, "</g>"]
    shapes = sum(1 for e in evs if lay.shows(e.t_ns) and (e.kind in MARKER_KINDS or id(e) not in used)) + sum(
        1 for _, start, end, _ in spans if _overlaps(lay, start, end))
    dropped = shapes - len(markers) - len(drawn) - len(points)
    width, height = LABEL_W + PLOT_W + 20, lay.height
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline {view}" id="timeline-{view}" '
            f'{_attr(data_kind="timeline", data_view=view, data_t0_ms=_ms(lay, lay.t0), data_t1_ms=_ms(lay, lay.t1))} '
            f'{_attr(data_run_ms=_ms(lay, lay.end), data_not_drawn=dropped or None)} width="{width}" '
            f'height="{height:.0f}" '
            f'viewBox="0 0 {width} {height:.0f}" role="img" '
            f'aria-label="timeline of {len(evs)} events, {view} view">' + "\n".join(parts) + "</svg>")


def _first(n: int, shapes: Iterable[str]) -> list[str]:
    """The first ``n`` shapes that are drawn ("" is one outside the view)."""
    return list(islice(filter(None, shapes), max(0, n)))


def focus(events: Sequence[Event], evidence: Evidence | None = None) -> tuple[int, int] | None:
    """The span that matters, (t_ns from, to), or None when there is none or it is most of the run.

    From the first fault reached, stop or stopping step (category stop, exit or signal: a stop, a shutdown,
    an exit, a kill) to the last event of the stop (its returns, drain, teardown steps, fault releases, the
    watchdog, the stopping steps' returns; the run's end when a stop never returned), widened to every
    violation's evidence, padded."""
    evs = sorted(events, key=lambda e: e.t_ns)
    starts = [e for e in evs if e.kind in OPENING or (e.kind == "step_started" and _stopping(e))]
    if not starts:
        return None
    first, last = evs[0].t_ns, evs[-1].t_ns
    lo = starts[0].t_ns
    ends = [e.t_ns for e in evs if e.t_ns >= lo and (e.kind in CLOSING or (e.kind == "step_returned"
                                                                         and _stopping(e)))]
    hi = max([lo, *ends])
    if _unfinished(evs):
        hi = last
    shown = [e.t_ns for e in evs if evidence_key(e) in (evidence or {})]
    lo, hi = min([lo, *shown]), max([hi, *shown])
    pad = max(int((hi - lo) * FOCUS_PAD), FOCUS_MIN_PAD_NS)
    lo, hi = max(first, lo - pad), min(last, hi + pad)
    return None if hi <= lo or hi - lo > FOCUS_MAX * (last - first) else (lo, hi)


def hang(events: Sequence[Event], evidence: Evidence | None = None) -> tuple[Window, Window | None] | None:
    """A hung run's span that matters, (from, to) and its silence, or None when the watchdog never fired.

    From its last progress (the last event before ``watchdog_fired``; from the first fault, stop or stopping
    step when one came before it: what led into the hang) to the watchdog firing and the kill after it, widened
    to every violation's evidence, padded.  The silence between the last progress and the watchdog, when it is
    over HANG_GAP of that span, is returned to be drawn as a break (its events stay in scale on either side)."""
    evs = sorted(events, key=lambda e: e.t_ns)
    fired = next((e.t_ns for e in evs if e.kind == "watchdog_fired"), None)
    before = [e for e in evs if fired is not None and e.t_ns < fired]
    if fired is None or not before:
        return None
    progress = before[-1].t_ns
    starts = [e.t_ns for e in before if e.kind in OPENING or (e.kind == "step_started" and _stopping(e))]
    shown = [e.t_ns for e in evs if evidence_key(e) in (evidence or {})]
    lo, hi = min([progress, *starts[:1], *shown]), max([evs[-1].t_ns, *shown])
    silence = fired - progress
    pad = max(int(((hi - lo) - silence) * FOCUS_PAD), FOCUS_MIN_PAD_NS)  # of the time drawn to scale
    lo, hi = max(evs[0].t_ns, lo - pad), min(evs[-1].t_ns, hi + pad)
    gap = (progress + pad, fired - pad) if silence - 2 * pad > HANG_GAP * (hi - lo) else None
    if hi <= lo or (gap is None and hi - lo > FOCUS_MAX * (evs[-1].t_ns - evs[0].t_ns)):
        return None
    return (lo, hi), gap


def _stopping(e: Event) -> bool:
    return category_of(e.data) in STOPPING


def _unfinished(evs: Sequence[Event]) -> bool:
    """A stopping step that never returned, or (no steps: a bare run) a process's stop that never returned."""
    steps = {e.data.get("step") for e in evs if e.kind == "step_started" and _stopping(e)}
    if steps:
        return bool(steps - {e.data.get("step") for e in evs if e.kind == "step_returned"})
    open_stops: dict[int, int] = {}
    for e in evs:
        if e.kind == "stop_started":
            open_stops[e.pid] = open_stops.get(e.pid, 0) + 1
        elif e.kind == "stop_returned" and open_stops.get(e.pid):
            open_stops[e.pid] -= 1
    return any(open_stops.values())


def timeline_views(events: Sequence[Event], evidence: Evidence | None = None) -> str:
    """The focus view with the whole run one click away below it (``details#whole-run``), or the whole
    view alone when the run has no focus (see :func:`focus`)."""
    evs = sorted(events, key=lambda e: e.t_ns)
    hung = hang(evs, evidence) if evs else None
    window, gap = hung if hung is not None else (focus(evs, evidence) if evs else None, None)
    whole = svg_timeline(evs, evidence, band=window)
    note = (f'<p class="drawn-note" data-kind="drawn-note">At most {MAX_DRAWN} shapes and {MAX_LANES} lanes are '
            "drawn in a view; the text timeline below and the history hold every event.</p>"
            if "data-not-drawn" in whole or "data-lanes=" in whole else "")
    if window is None:
        return f'{note}<div class="scroll">{whole}</div>'
    t = [f"{(x - evs[0].t_ns) / 1e6:.1f}" for x in (*window, evs[-1].t_ns)]
    inside = sum(1 for e in evs if window[0] <= e.t_ns <= window[1])
    what = ("from the first fault, stop or kill to the stop's last event and the evidence" if hung is None else
            "the hang: from its last progress to the watchdog firing and the kill" + (
                "" if gap is None else f", its {(gap[1] - gap[0]) / 1e6:.1f} ms without an event drawn as a break"))
    return (f'{note}<p class="focus-note" data-kind="focus-note">Showing {t[0]}-{t[1]} ms of {t[2]} ms ({inside} of '
            f"{len(evs)} events): {what}, "
            f'padded. <a href="#whole-run">The whole run</a> is below.</p>'
            f'<div class="scroll">{svg_timeline(evs, evidence, window, gap=gap)}</div>'
            f'<details id="whole-run" class="whole-run"><summary>The whole run: 0-{t[2]} ms, {len(evs)} events '
            f'(click to show)</summary><div class="scroll">{whole}</div></details>')
