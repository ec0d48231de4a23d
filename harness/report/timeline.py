"""The inline SVG timeline of one run.

x is time in ms from the first event; there is one lane per (process, thread).
What is drawn, and how a test or a browser finds it (every element has a
``class`` and a ``data-kind``; each carries a ``<title>`` tooltip):

* ``rect.lane`` / ``text.lane-label``: the lanes (``data-process``, ``data-thread``).
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
* ``g.violation.evidence`` (``data-kind`` the event's kind, ``data-checker``):
  a red ring on each evidence event of a violated verdict, titled with the
  checker's message; the span or marker it belongs to also gets ``violation``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

from harness.history import Event

__all__ = ["svg_timeline", "Evidence", "evidence_key", "MARKER_KINDS", "SPANS"]

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
LABEL_CHARS = 46  # characters of a lane label at most (the column is LABEL_W wide)

Key = tuple[int, int, str, str]  # (t_ns, pid, kind, thread): how an evidence event is found in the history
Evidence = dict[Key, list[tuple[str, str]]]  # event key -> [(checker, message)]


def evidence_key(e: Event) -> Key:
    return (e.t_ns, e.pid, e.kind, e.thread)


def _process(e: Event) -> tuple[int, str]:
    return (e.pid, e.rank or e.role)


@dataclass
class _Layout:
    t0: int
    t1: int
    lanes: dict[tuple[int, str, str], int] = field(default_factory=dict)  # (pid, label, thread) -> index
    groups: dict[tuple[int, str], list[int]] = field(default_factory=dict)  # process -> its lane indexes

    def x(self, t_ns: int) -> float:
        return LABEL_W + (t_ns - self.t0) / max(1, self.t1 - self.t0) * PLOT_W

    def y(self, lane: int) -> float:
        return TOP + lane * LANE_H

    def lane(self, e: Event) -> int:
        pid, label = _process(e)
        found = self.lanes.get((pid, label, e.thread))
        return found if found is not None else self.groups[(pid, label)][0]

    @property
    def height(self) -> float:
        return TOP + len(self.lanes) * LANE_H + BOTTOM


def _layout(events: Sequence[Event]) -> _Layout:
    lay = _Layout(events[0].t_ns, events[-1].t_ns)
    threadless: list[Event] = []
    for e in events:
        if not e.thread:
            threadless.append(e)
            continue
        _add_lane(lay, e, e.thread)
    for e in threadless:  # process_exited and the like: on the process's first lane, or a lane of its own
        if _process(e) not in lay.groups:
            _add_lane(lay, e, "")
    # processes in order of their first event, each process's threads together, in order of their first event
    order = [k for g in lay.groups for k in lay.lanes if (k[0], k[1]) == g]  # dicts keep insertion order
    lay.lanes = {k: i for i, k in enumerate(order)}
    lay.groups = {}
    for (pid, label, _t), i in lay.lanes.items():
        lay.groups.setdefault((pid, label), []).append(i)
    return lay


def _add_lane(lay: _Layout, e: Event, thread: str) -> None:
    pid, label = _process(e)
    key = (pid, label, thread)
    if key not in lay.lanes:
        lay.lanes[key] = len(lay.lanes)
        lay.groups.setdefault((pid, label), []).append(lay.lanes[key])


def _ms(lay: _Layout, t_ns: int) -> str:
    return f"{(t_ns - lay.t0) / 1e6:.3f}"


def _tip(lay: _Layout, e: Event, extra: str = "") -> str:
    data = ", ".join(f"{k}={v}" for k, v in list(e.data.items())[:DATA_SHOWN] if k != "text")
    who = f"{e.rank or e.role} pid {e.pid} {e.thread}".strip()
    return f"{e.kind} @ {_ms(lay, e.t_ns)} ms, {who}" + (f": {data}" if data else "") + extra


def _blame(ev: Evidence, *events: Event | None) -> tuple[str, str]:
    """(' violation', tooltip suffix) when one of ``events`` is evidence, else ('', '')."""
    hits = [h for e in events if e is not None for h in ev.get(evidence_key(e), [])]
    if not hits:
        return "", ""
    return " violation", "".join(f"\nVIOLATED {c}: {m}" for c, m in hits)


def _attr(**kw: object) -> str:
    return " ".join(f'{k.replace("_", "-")}="{escape(str(v), quote=True)}"' for k, v in kw.items() if v is not None)


def _data_of(e: Event) -> dict[str, object]:
    return {"data_listener": e.data.get("listener"), "data_conn": e.data.get("conn"), "data_pid": e.pid,
            "data_thread": e.thread}


def _spans(lay: _Layout, events: Sequence[Event], ev: Evidence) -> tuple[list[str], set[int]]:
    """The spans, and the ids of the events they were drawn from (the rest are drawn as points)."""
    out: list[str] = []
    used: set[int] = set()
    closing = {end: kind for kind, (_, end) in SPANS.items()}
    opening = {start: kind for kind, (start, _) in SPANS.items()}
    live: dict[tuple[str, int, str, object], list[Event]] = {}
    for e in events:
        kind = opening.get(e.kind) or closing.get(e.kind)
        if kind is not None:
            key = (kind, e.pid, str(e.data.get("listener", e.rank)), None if kind == "drain" else e.data.get("conn"))
            if e.kind in opening:
                live.setdefault(key, []).append(e)
            elif live.get(key):
                start = live[key].pop(0)
                out.append(_span(lay, kind, start, e, "", ev))
                used |= {id(start), id(e)}
        elif e.kind == "connection_closed":  # a frame still being read is cancelled by the close
            key = ("frame", e.pid, str(e.data.get("listener", e.rank)), e.data.get("conn"))
            for start in live.pop(key, []):
                out.append(_span(lay, "frame", start, e, " cancelled", ev))
                used.add(id(start))
    for starts in live.values():
        for start in starts:
            out.append(_span(lay, opening[start.kind], start, None, " open", ev))
            used.add(id(start))
    return out, used


def _span(lay: _Layout, kind: str, start: Event, end: Event | None, state: str, ev: Evidence) -> str:
    t_end = end.t_ns if end is not None else lay.t1
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
    x = lay.x(e.t_ns)
    everywhere = e.kind in GLOBAL_MARKERS
    lanes = list(range(len(lay.lanes))) if everywhere else lay.groups.get(_process(e), [lay.lane(e)])
    y0, y1 = lay.y(min(lanes)), lay.y(max(lanes) + 1)
    state, ok = "", None
    if e.kind == "stop_returned":
        ok = bool(e.data.get("ok"))
        state = " ok" if ok else " failed"
    bad, why = _blame(ev, e)
    return (f'<line class="marker {e.kind}{state}{bad}" {_attr(data_kind=e.kind, data_t_ms=_ms(lay, e.t_ns))} '
            f'{_attr(data_ok=None if ok is None else str(ok).lower(), data_site=e.data.get("site"), **_data_of(e))} '
            f'x1="{x:.1f}" x2="{x:.1f}" y1="{y0:.1f}" y2="{y1:.1f}"><title>{escape(_tip(lay, e) + why)}</title></line>')


def _point(lay: _Layout, e: Event, ev: Evidence) -> str:
    x, y = lay.x(e.t_ns), lay.y(lay.lane(e)) + LANE_H / 2
    bad, why = _blame(ev, e)
    if e.kind == "teardown_step":
        return (f'<rect class="mark teardown_step{bad}" {_attr(data_kind=e.kind, data_t_ms=_ms(lay, e.t_ns))} '
                f'{_attr(data_step=e.data.get("step"), **_data_of(e))} x="{x - 1.5:.1f}" y="{y - 7:.1f}" '
                f'width="3" height="14"><title>{escape(_tip(lay, e) + why)}</title></rect>')
    return (f'<circle class="event{bad}" {_attr(data_kind=e.kind, data_t_ms=_ms(lay, e.t_ns), **_data_of(e))} '
            f'cx="{x:.1f}" cy="{y:.1f}" r="2.5"><title>{escape(_tip(lay, e) + why)}</title></circle>')


def _evidence(lay: _Layout, events: Sequence[Event], ev: Evidence) -> list[str]:
    out = []
    for e in events:
        for checker, message in ev.get(evidence_key(e), []):
            x, y = lay.x(e.t_ns), lay.y(lay.lane(e)) + LANE_H / 2
            out.append(f'<g class="violation evidence" {_attr(data_kind=e.kind, data_checker=checker)} '
                       f'{_attr(data_t_ms=_ms(lay, e.t_ns), **_data_of(e))}>'
                       f'<circle cx="{x:.1f}" cy="{y:.1f}" r="6"/>'
                       f"<title>{escape(f'VIOLATED {checker}: {message}' + chr(10) + _tip(lay, e))}</title></g>")
    return out


def _tick_step(span_ms: float) -> float:
    raw = span_ms / MAX_TICKS
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)


def _axis(lay: _Layout) -> list[str]:
    span_ms = (lay.t1 - lay.t0) / 1e6
    step = _tick_step(span_ms) if span_ms > 0 else 1.0
    out, n = [], 0
    while n * step <= span_ms + 1e-9:
        x = lay.x(lay.t0 + int(n * step * 1e6))
        out.append(f'<line class="tick" data-kind="tick" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP - 4}" '
                   f'y2="{lay.height - BOTTOM:.1f}"/><text class="tick-label" x="{x:.1f}" y="{TOP - 8}">'
                   f"{n * step:g} ms</text>")
        n += 1
    return out


def _lanes(lay: _Layout) -> list[str]:
    out = []
    for (pid, label, thread), i in lay.lanes.items():
        y = lay.y(i)
        cls = "lane odd" if i % 2 else "lane"
        attrs = _attr(data_kind="lane", data_process=label, data_pid=pid, data_thread=thread or "(process)")
        name = f"{label} [{pid}] {thread or '(process)'}"[:LABEL_CHARS]
        out.append(f'<rect class="{cls}" {attrs} x="0" y="{y}" width="{LABEL_W + PLOT_W + 10}" height="{LANE_H}"/>'
                   f'<text class="lane-label" {attrs} x="4" y="{y + LANE_H - 6}">{escape(name)}</text>')
    return out


def svg_timeline(events: Sequence[Event], evidence: Evidence | None = None) -> str:
    """The inline ``<svg class="timeline">`` of ``events``; a note instead when there are none."""
    evs = sorted(events, key=lambda e: e.t_ns)
    if not evs:
        return '<p class="empty-timeline">(no events: nothing to draw)</p>'
    ev = evidence or {}
    lay = _layout(evs)
    spans, used = _spans(lay, evs, ev)
    parts = _lanes(lay) + _axis(lay)
    parts += ['<g class="spans">', *spans, "</g>", '<g class="events">']
    parts += [_point(lay, e, ev) for e in evs if id(e) not in used and e.kind not in MARKER_KINDS]
    parts += ["</g>", '<g class="markers">', *(_marker(lay, e, ev) for e in evs if e.kind in MARKER_KINDS), "</g>"]
    parts += ['<g class="violations">', *_evidence(lay, evs, ev), "</g>"]
    width, height = LABEL_W + PLOT_W + 20, lay.height
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" data-kind="timeline" width="{width}" '
            f'height="{height:.0f}" viewBox="0 0 {width} {height:.0f}" role="img" '
            f'aria-label="timeline of {len(evs)} events">' + "\n".join(parts) + "</svg>")
