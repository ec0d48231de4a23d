"""The engine's lanes on a run's SVG timeline: a lane per process of the engine tree and a bar per request.

An engine run (cast ``engine``: ``vllm serve`` or the stand-in) is driven from outside, so its history holds
the harness's view of the tree, not the tree's own events.  From it, below the (process, thread) lanes of
:mod:`harness.report.timeline`:

* ``rect.engine-lane`` (``data-pid``, ``data-name``): a lane per process of the tree, in order of first sight.
  ``rect.life`` (``data-kind="process-life"``, ``data-end``): its life, from its launch (``engine_launched``;
  a child of the tree from its launch too, its own start unseen) to how it ended: ``exited``
  (``engine_process_exited``, or ``engine_start_failed``: it exited before it was ready), ``survived``
  (among a ``wait_gone``'s survivors: drawn to the run's end), ``closed`` (ended by the harness: at the
  run's end, ``engine_closed``, or a start that hung) or ``open`` (no end seen).
  ``line.life-mark`` (``data-kind`` ``process-ready`` / ``process-signalled`` with ``data-sig`` /
  ``process-exited``): its ready line, each signal sent to it, its exit.
* ``rect.request-lane`` / ``rect.request`` (``data-kind="request"``, ``data-step``, ``data-outcome``,
  ``data-end``): a lane and a bar per ``engine_request`` step, from its send (``step_started``) to its end
  (``step_returned``): ``answered`` (outcome complete), ``hung`` (hung, or never returned: drawn to the
  run's end), ``not_sent``, else ``aborted`` (aborted, refused, cut, disconnected).

Each shape carries a ``<title>`` with its times in ms of the run.  Past ENGINE_LANES processes or requests
the rest are left out of the drawing (the text timeline and the history hold them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

from harness.artifacts import cut
from harness.history import Event

__all__ = ["EngineRows", "engine_rows", "draw_engine", "ENDS", "REQUEST_ENDS"]

ENGINE_LANES = 100  # process lanes and request lanes drawn at most, each
ENDS = ("exited", "survived", "closed", "open")  # how a process's life ends on its lane
REQUEST_ENDS = ("answered", "aborted", "hung", "not_sent")  # how a request's bar ends
_OUTCOME_END = {"complete": "answered", "hung": "hung", "not_sent": "not_sent"}  # any other outcome: aborted
CHARS = 120  # characters of one attribute value or label at most


@dataclass
class Life:
    pid: int
    name: str
    launched: int  # t_ns of its launch's engine_launched (or its first sight)
    ready: int | None = None
    signals: list[tuple[int, str]] = field(default_factory=list)  # (t_ns, signal name)
    ended: int | None = None  # t_ns of its exit or close
    end: str = "open"


@dataclass
class Request:
    step: str
    sent: int
    ended: int | None = None
    outcome: str = "no answer"
    end: str = "hung"


@dataclass
class EngineRows:
    lives: dict[int, Life] = field(default_factory=dict)
    requests: dict[str, Request] = field(default_factory=dict)

    @property
    def lanes(self) -> int:
        return min(len(self.lives), ENGINE_LANES) + min(len(self.requests), ENGINE_LANES)


def _listed(x: Any) -> list[Any]:
    """``x`` when a list, else none (a history's data is read as it was written, whatever its shape)."""
    return x if isinstance(x, list) else []


def _life_of(rows: EngineRows, m: Any) -> Life | None:
    """The life of member ``m`` (a mapping with its pid), if it is one of the tree's."""
    pid = m.get("pid") if isinstance(m, Mapping) else None
    return rows.lives.get(pid) if isinstance(pid, int) else None


def _members(rows: EngineRows, members: Any, t: int, launched: int) -> None:
    for m in _listed(members):
        if isinstance(m, Mapping) and isinstance(m.get("pid"), int):
            life = rows.lives.setdefault(m["pid"], Life(m["pid"], str(m.get("name", "?")), min(launched, t)))
            if life.name in ("?", "") and m.get("name"):
                life.name = str(m["name"])


def _step_event(rows: EngineRows, e: Event, launched: int) -> None:
    kind, step = e.data.get("kind"), str(e.data.get("step", ""))
    if e.kind == "step_started" and kind == "engine_signal" and isinstance(e.data.get("pid"), int):
        _members(rows, e.data.get("members"), e.t_ns, launched)
        signalled = rows.lives.setdefault(e.data["pid"], Life(e.data["pid"], str(e.data.get("process", "?")), e.t_ns))
        signalled.signals.append((e.t_ns, str(e.data.get("sig", "?"))))
    elif e.kind == "step_started" and kind == "engine_request":
        rows.requests.setdefault(step, Request(step, e.t_ns))
    elif e.kind == "step_returned" and kind == "engine_request" and step in rows.requests:
        value = e.data.get("value")
        outcome = str(value.get("outcome", "?")) if isinstance(value, Mapping) else "?"
        rows.requests[step].ended, rows.requests[step].outcome = e.t_ns, outcome
        rows.requests[step].end = _OUTCOME_END.get(outcome, "aborted")
    elif e.kind == "step_returned" and kind == "wait_gone" and isinstance(e.data.get("value"), Mapping):
        for m in _listed(e.data["value"].get("survivors")):
            survivor = _life_of(rows, m)
            if survivor is not None and survivor.end in ("open", "closed"):
                survivor.end, survivor.ended = "survived", None


def _start_failed(rows: EngineRows, e: Event, leader: int | None) -> None:
    """A launch that never became ready: it exited (its status known), or it hung and the harness stopped it."""
    end = "closed" if e.data.get("hung") else "exited"
    for m in [{"pid": leader}, *_listed(e.data.get("members"))]:
        life = _life_of(rows, m)
        if life is not None and life.end == "open":
            life.end, life.ended = end, e.t_ns


def engine_rows(events: Sequence[Event]) -> EngineRows:
    """The tree's processes and the requests of an engine run's history (empty for any other run)."""
    rows = EngineRows()
    launched = 0
    leaders: dict[object, int] = {}  # launch -> its API server's pid
    for e in events:
        if e.kind == "engine_launched" and isinstance(e.data.get("pid"), int):
            launched = e.t_ns
            leaders[str(e.data.get("launch"))] = e.data["pid"]
            rows.lives.setdefault(e.data["pid"], Life(e.data["pid"], "api_server", e.t_ns))
        elif e.kind == "engine_start_failed":
            _start_failed(rows, e, leaders.get(str(e.data.get("launch"))))
        elif e.kind in ("engine_ready", "engine_handed"):
            _members(rows, e.data.get("members"), e.t_ns, launched or e.t_ns)
            for m in _listed(e.data.get("members")) or [{"pid": e.data.get("pid")}]:
                life = _life_of(rows, m)
                if life is not None and life.ready is None:
                    life.ready = e.t_ns
        elif e.kind == "engine_process_exited" and (life := _life_of(rows, e.data)) is not None:
            if life.end not in ("exited", "survived"):  # a survivor the harness ended later still survived
                life.end, life.ended = "exited", e.t_ns
        elif e.kind == "engine_closed":
            for m in [*_listed(e.data.get("killed")), *_listed(e.data.get("terminated"))]:
                life = _life_of(rows, m)
                if life is not None and life.end == "open":
                    life.end, life.ended = "closed", e.t_ns
        elif e.kind in ("step_started", "step_returned"):
            _step_event(rows, e, launched or e.t_ns)
    return rows


def _attr(**kw: object) -> str:
    return " ".join(f'{k.replace("_", "-")}="{escape(cut(str(v), CHARS), quote=True)}"'
                    for k, v in kw.items() if v is not None)


@dataclass
class Axis:
    """What the engine lanes need of the view's layout: where a time and a lane are drawn."""

    x: Callable[[int], float]
    y: Callable[[int], float]
    ms: Callable[[int], str]
    t0: int
    t1: int
    end: int  # the run's last event: where an open bar ends
    lane_h: int
    width: float


def _bar(a: Axis, lane: int, start: int, stop: int, cls: str, attrs: str, tip: str) -> str:
    if stop < a.t0 or start > a.t1:
        return ""
    x0, x1 = a.x(start), a.x(stop)
    return (f'<rect class="{cls}" {attrs} x="{x0:.1f}" y="{a.y(lane) + 6:.1f}" width="{max(2.0, x1 - x0):.1f}" '
            f'height="{a.lane_h - 12}"><title>{escape(tip)}</title></rect>')


def _mark(a: Axis, lane: int, t: int, kind: str, tip: str, **extra: object) -> str:
    if not a.t0 <= t <= a.t1:
        return ""
    x = a.x(t)
    return (f'<line class="life-mark {kind}" {_attr(data_kind="process-" + kind, data_t_ms=a.ms(t), **extra)} '
            f'x1="{x:.1f}" x2="{x:.1f}" y1="{a.y(lane) + 2:.1f}" y2="{a.y(lane) + a.lane_h - 2:.1f}">'
            f"<title>{escape(tip)}</title></line>")


def _lane(a: Axis, lane: int, cls: str, attrs: str, label: str) -> str:
    y = a.y(lane)
    return (f'<rect class="lane {cls}" {attrs} x="0" y="{y}" width="{a.width}" height="{a.lane_h}"/>'
            f'<text class="lane-label" {attrs} x="4" y="{y + a.lane_h - 6}">{escape(cut(label, 60))}</text>')


def _life(a: Axis, lane: int, life: Life) -> list[str]:
    who = f"{life.name} pid {life.pid}"
    attrs = _attr(data_kind="engine-lane", data_pid=life.pid, data_name=life.name)
    stop = life.ended if life.ended is not None else a.end
    words = {"exited": "exited", "survived": "survived (still alive when the tree should be gone)",
             "closed": "ended by the harness at the run's end", "open": "no end seen"}[life.end]
    out = [_lane(a, lane, "engine-lane", attrs, f"{who}"),
           _bar(a, lane, life.launched, stop, f"life {life.end}",
                _attr(data_kind="process-life", data_pid=life.pid, data_end=life.end, data_t_ms=a.ms(life.launched),
                      data_t_end_ms=a.ms(stop)),
                f"{who}: launched @ {a.ms(life.launched)} ms, {words} @ {a.ms(stop)} ms")]
    if life.ready is not None:
        out.append(_mark(a, lane, life.ready, "ready", f"{who}: ready @ {a.ms(life.ready)} ms", data_pid=life.pid))
    out += [_mark(a, lane, t, "signalled", f"{who}: {sig} sent @ {a.ms(t)} ms", data_pid=life.pid, data_sig=sig)
            for t, sig in life.signals]
    if life.end == "exited" and life.ended is not None:
        out.append(_mark(a, lane, life.ended, "exited", f"{who}: exited @ {a.ms(life.ended)} ms", data_pid=life.pid))
    return out


def _request(a: Axis, lane: int, r: Request) -> list[str]:
    stop = r.ended if r.ended is not None else a.end
    attrs = _attr(data_kind="request-lane", data_step=r.step)
    return [_lane(a, lane, "request-lane", attrs, f"request {r.step}"),
            _bar(a, lane, r.sent, stop, f"request {r.end}",
                 _attr(data_kind="request", data_step=r.step, data_outcome=r.outcome, data_end=r.end,
                       data_t_ms=a.ms(r.sent), data_t_end_ms=a.ms(stop)),
                 f"request {r.step}: sent @ {a.ms(r.sent)} ms, {r.outcome} @ {a.ms(stop)} ms "
                 f"({(stop - r.sent) / 1e6:.3f} ms)")]


def draw_engine(rows: EngineRows, a: Axis, first: int) -> list[str]:
    """The engine's lanes from lane ``first`` on: its processes, then its requests."""
    out: list[str] = []
    lane = first
    for life in list(rows.lives.values())[:ENGINE_LANES]:
        out += _life(a, lane, life)
        lane += 1
    for r in list(rows.requests.values())[:ENGINE_LANES]:
        out += _request(a, lane, r)
        lane += 1
    return [s for s in out if s]
