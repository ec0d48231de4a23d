"""Verdicts, the run record checkers read, and the registry they sit in.

A checker is a pure function ``(run, params) -> Verdict``: it never opens a
socket, starts a process or reads a clock.  Three verdicts, as Jepsen's:
``ok``, ``violated`` (with the evidence events) and ``unknown`` (with why);
a checker that crashes yields ``unknown`` with the error, never a crash.

Evidence: a checker that judges a party's events (the listener's, the worker
side's; :data:`harness.events.PARTIES`) declares, per party, the kinds whose
presence proves that party was observed (``evidence=``), apart from the kinds it
judges (``judges=``).  When none of a party's proving kinds is in the history the
verdict is ``unknown``, naming the missing evidence, instead of an ``ok`` on
nothing; when the target declares the party absent (it lacks the party's
capability, :data:`harness.events.PARTY_CAPABILITIES`) the verdict is
``not_judged``, which does not fail the run.  A checker with no evidence is
black-box: it reads probes and the harness's own steps only.  An expect entry's
``allow_unknown: <reason>`` lets its unknown verdict pass, the reason printed
beside it.
"""

from __future__ import annotations

import inspect
import re
import traceback
import typing
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, TypeVar

from pydantic import ValidationError

from harness.checkers.params import CHECKER_PARAMS, Params
from harness.errors import ConfigError
from harness.events import BUDGET_KIND, KINDS, OBSERVED_BY, PARTY_CAPABILITIES
from harness.history import Event
from harness.plainerrors import plain
from harness.probes.model import Snapshot

__all__ = ["Verdict", "RunRecord", "Checker", "CHECKERS", "checker", "judge", "judge_all", "key_of", "observed",
           "not_judged", "NOT_JUDGED", "load_plugins", "PLUGIN_ERRORS", "cut_text", "MAX_EVIDENCE", "MAX_COLLECTED"]

OK, VIOLATED, UNKNOWN, NOT_JUDGED = "ok", "violated", "unknown", "not_judged"
Evidence = Mapping[str, tuple[str, ...]]  # party -> the kinds that prove it was observed
# evidence events a verdict keeps (each is copied into verdicts.json, for each of up to 1000 expect entries);
# the page lists 50
MAX_EVIDENCE = 100
# evidence events a checker collects at most where its evidence grows with pairs of what the history names (a stop
# and each connection live at it, a stop's return and each handler inside): a forged history makes those
# quadratic.  Past it the verdict is certain (violated) and the checker stops looking, with a note saying so; far
# above what a real run gives (at most a few stops) and above MAX_EVIDENCE, so what a verdict keeps is the same
MAX_COLLECTED = 1000
_T = TypeVar("_T")


def observed(*parties: str) -> dict[str, tuple[str, ...]]:
    """The evidence a checker of these parties' events declares: each party's proving kinds (harness.events)."""
    return {p: OBSERVED_BY[p] for p in parties}


@dataclass(frozen=True)
class Verdict:
    """What one checker concluded about one run."""

    checker: str
    status: str  # ok | violated | unknown | not_judged
    message: str = ""
    evidence: tuple[Event, ...] = ()
    notes: tuple[str, ...] = ()  # reported, not violations (e.g. TIME_WAIT remnants)
    allowed: str = ""  # unknown only: the expect entry's allow_unknown reason

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def passes(self) -> bool:
        """Whether this verdict lets the run pass: ok, not judged, or an unknown its entry allows."""
        return self.status in (OK, NOT_JUDGED) or (self.status == UNKNOWN and bool(self.allowed))

    def to_dict(self) -> dict[str, Any]:
        return {"checker": self.checker, "status": self.status, "message": self.message,
                "evidence": [e.__dict__ for e in self.evidence], "notes": list(self.notes),
                **({"allowed": self.allowed} if self.allowed else {})}


@dataclass(frozen=True)
class RunRecord:
    """Everything a checker may look at: the history and the snapshots, by label.

    Its views of the events (in time order, by kind, the indexes of :meth:`derived`) are computed once and
    shared by every checker that judges it: a record is never changed, and each view is a pure function of it.
    """

    events: tuple[Event, ...]
    snapshots: dict[str, Snapshot] = field(default_factory=dict)
    scale: float = 1.0  # LASTCALL_TIMEOUT_SCALE of the run: every time bound a checker applies is stretched by it
    absent: frozenset[str] = frozenset()  # parties the target declares absent (harness.events.absent_parties)

    @cached_property
    def cut(self) -> Event | None:
        """The history_budget_reached event, when the history was cut at its byte budget (harness.history)."""
        return next((e for e in reversed(self.events) if e.kind == BUDGET_KIND), None)

    def of(self, *kinds: str) -> list[Event]:
        """The events of these kinds, in the history's order."""
        lists = [self._by_kind[k] for k in dict.fromkeys(kinds) if k in self._by_kind]
        if len(lists) == 1:
            return [e for _, e in lists[0]]
        return [e for _, e in sorted((x for xs in lists for x in xs), key=lambda x: x[0])]

    @property
    def ordered(self) -> list[Event]:
        """The events in time order (a stable sort: events of one time keep the history's order)."""
        return list(self._ordered)

    @cached_property
    def kinds(self) -> frozenset[str]:
        """The kinds the history holds."""
        return frozenset(self._by_kind)

    @cached_property
    def first_t(self) -> int | None:
        """The time of the history's first event (None: it has none)."""
        return self._ordered[0].t_ns if self._ordered else None

    def derived(self, key: Hashable, make: Callable[[], _T]) -> _T:
        """``make()``, computed once per record under ``key``: an index a checker builds over the events (kept
        beside the record, so the checkers judging it share it)."""
        memo: dict[Hashable, Any] = self.__dict__.setdefault("_derived", {})
        if key not in memo:
            memo[key] = make()
        return typing.cast(_T, memo[key])

    @cached_property
    def _ordered(self) -> tuple[Event, ...]:
        return tuple(sorted(self.events, key=lambda e: e.t_ns))

    @cached_property
    def _by_kind(self) -> dict[str, list[tuple[int, Event]]]:
        out: dict[str, list[tuple[int, Event]]] = {}
        for i, e in enumerate(self.events):
            out.setdefault(e.kind, []).append((i, e))
        return out


CheckFn = Callable[[RunRecord, Any], Verdict]


@dataclass(frozen=True)
class Checker:
    """A registered checker: its function, what it judges, and the evidence it needs (see the module docstring)."""

    name: str
    fn: CheckFn
    about: str
    judges: tuple[str, ...] = ()  # the event kinds it reads
    evidence: Evidence | Callable[[Any], Evidence] = field(default_factory=dict)  # may depend on the params
    params: type[Params] = Params  # its parameter model (a scenario's expect entry is validated against it)
    # whether its verdict can depend on how the run's processes exit (their module teardown, C exit handlers):
    # False lets a run of the built-in reference skip that teardown (harness.scenario.exitmode); None, not
    # declared (a plug-in's), counts as True
    observes_exit: bool | None = None
    # for a checker with a time bound: what it times and how a loaded machine changes that (docs/checkers.md)
    timing: str = ""

    def evidence_for(self, params: Any) -> Evidence:
        return self.evidence(params) if callable(self.evidence) else self.evidence

    @property
    def black_box(self) -> bool:
        """Judged from probes and the harness's own steps only (with its default parameters)."""
        return not self.evidence_for(self.params.model_construct())  # the defaults, unvalidated


CHECKERS: dict[str, Checker] = {}


def checker(name: str, about: str, *, params: type[Params] | None = None, judges: tuple[str, ...] = (),
            evidence: Evidence | Callable[[Any], Evidence] | None = None,
            observes_exit: bool | None = None, timing: str = "") -> Callable[[CheckFn], CheckFn]:
    """Register ``fn`` as the checker ``name``, with its parameter model: both halves of the registry at once.

    ``params``: the pydantic model (a :class:`~harness.checkers.params.Params`) its expect entry takes; left
    out, the annotation of ``fn``'s second argument (``def mine(run: RunRecord, p: MyParams)``), else
    :class:`Params` (no parameters).  ``judges``: the event kinds it reads; ``evidence``: per party, the
    kinds that prove the party was observed (:func:`observed`), or a function of the parameters giving
    them.  Every kind named must be one of harness.events.  ``observes_exit``: whether its verdict can depend on
    how the run's processes exit past their main and atexit hooks (module teardown, C-level exit handlers);
    declare False only for a checker that reads nothing recorded then, and leave it out (or True) otherwise.
    ``timing``, for a checker with a time bound: what it times and how load on the machine changes it.
    A name registered twice is an error.
    """
    if not _NAME.fullmatch(name):
        raise ConfigError(f"checker name {name!r} is not a lower_snake_case identifier")
    named = [*judges, *(k for ks in (evidence.values() if isinstance(evidence, Mapping) else ()) for k in ks)]
    strange = sorted(set(named) - set(KINDS))
    if strange:
        raise ConfigError(f"checker {name!r} names event kind(s) {strange} that harness.events does not declare")

    def register(fn: CheckFn) -> CheckFn:
        model = params if params is not None else _annotated_params(name, fn)
        if not (isinstance(model, type) and issubclass(model, Params)):
            raise ConfigError(f"checker {name!r}: params must be a harness.checkers.params.Params model, "
                              f"not {model!r}")
        old = CHECKERS.get(name)
        if old is not None and old.fn is not fn:
            raise ConfigError(f"checker {name!r} is registered twice ({_where(old.fn)} and {_where(fn)})")
        CHECKERS[name] = Checker(name, fn, about, tuple(judges), evidence if evidence is not None else {}, model,
                                 observes_exit, timing)
        CHECKER_PARAMS[name] = model
        return fn

    return register


_NAME = re.compile(r"[a-z][a-z0-9_]*")


def _where(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"


def _annotated_params(name: str, fn: CheckFn) -> Any:
    """The model ``fn`` annotates its parameters argument with (its second), or Params when it has none."""
    args = list(inspect.signature(fn).parameters)
    if len(args) < 2:
        raise ConfigError(f"checker {name!r}: {_where(fn)} must take (run, params)")
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:  # an annotation naming something the module does not have
        raise ConfigError(f"checker {name!r}: cannot read the annotations of {_where(fn)}: {exc}") from None
    return hints.get(args[1], Params)


def load_plugins() -> dict[str, str]:
    """Import every ``lastcall.checkers`` entry point (each registers its checkers with @checker).

    Eager, as pytest loads ``pytest11``: the schema of an expect entry is built from the registry, so a
    plug-in checker must be registered before a scenario is read (keep such modules light: no torch).
    Returns the entry points that failed, name -> the one-line reason; ``judge`` names them when asked for a
    checker it does not know.
    """
    from harness import entrypoints

    for ep_name in entrypoints.names(entrypoints.CHECKERS):
        if ep_name in PLUGIN_ERRORS:
            continue
        try:
            entrypoints.load(entrypoints.CHECKERS, ep_name)
        except ConfigError as exc:
            PLUGIN_ERRORS[ep_name] = str(exc)
    return dict(PLUGIN_ERRORS)


PLUGIN_ERRORS: dict[str, str] = {}  # lastcall.checkers entry points that failed to load, name -> why


def key_of(e: Event) -> tuple[int, str]:
    """Which listener an event belongs to: (pid, listener label)."""
    return (e.pid, str(e.data.get("listener", e.rank)))


def judge(name: str, run: RunRecord, params: dict[str, Any] | Params | None = None, *,
          allow_unknown: str | None = None) -> Verdict:
    """Run one checker; a crash or bad parameters are ``unknown`` with the reason, never an exception.

    ``not_judged`` when the target declares absent a party whose events the checker needs; ``unknown``,
    naming the missing evidence, when such a party emitted none of its proving kinds.  ``allow_unknown``
    (an expect entry's reason) is kept in an unknown verdict, which then passes, and printed beside it.
    In a history cut at its byte budget (:attr:`RunRecord.cut`) an ``ok`` is ``unknown``, the events after
    the cut never stored, and ``allow_unknown`` does not let it pass (the reason it gives is not the budget);
    an ``unknown`` says the history was cut; a violation found on the stored events stays violated.  A
    verdict keeps at most :data:`MAX_EVIDENCE` evidence events, a note counting the rest.
    """
    verdict = _kept(_judge(name, run, params))
    cut = run.cut
    if cut is not None and verdict.status == OK:
        return Verdict(name, UNKNOWN, f"{cut_text(run, cut)}: the events after it were not stored")
    if cut is not None and verdict.status == UNKNOWN:  # the evidence it lacks may be what was not stored
        verdict = replace(verdict, message=f"{verdict.message} ({cut_text(run, cut)}: the events after it were "
                          "not stored)")
    if verdict.status == UNKNOWN and allow_unknown:
        return replace(verdict, allowed=allow_unknown,
                       message=f"{verdict.message} [unknown allowed: {allow_unknown}]")
    return verdict


def _kept(verdict: Verdict) -> Verdict:
    """``verdict`` with at most MAX_EVIDENCE evidence events, the rest counted in a note."""
    if len(verdict.evidence) <= MAX_EVIDENCE:
        return verdict
    left = len(verdict.evidence) - MAX_EVIDENCE
    return replace(verdict, evidence=verdict.evidence[:MAX_EVIDENCE],
                   notes=(*verdict.notes, f"{left} more evidence event(s) not kept (the history has them)"))


def _judge(name: str, run: RunRecord, params: dict[str, Any] | Params | None) -> Verdict:
    chk = CHECKERS.get(name)
    if chk is None:
        broken = "; ".join(PLUGIN_ERRORS.values())  # the checker may be one of a plug-in that failed to load
        return Verdict(name, UNKNOWN, f"no checker named {name!r}" + (f" ({broken})" if broken else ""))
    try:
        p = params if isinstance(params, Params) else chk.params(**(params or {}))
    except ValidationError as exc:
        return Verdict(name, UNKNOWN, "bad parameters: " + "; ".join(plain(exc)))
    try:
        needs = chk.evidence_for(p)
        gone = [party for party in needs if party in run.absent]
        if gone:
            return Verdict(name, NOT_JUDGED, "not judged: the target declares no " + " or ".join(
                f"{party} events (no capability {PARTY_CAPABILITIES[party]})" for party in gone))
        unseen = [(party, kinds) for party, kinds in needs.items() if not run.kinds.intersection(kinds)]
        if unseen:
            return Verdict(name, UNKNOWN, "no evidence: " + "; ".join(
                f"the {party} emitted none of {', '.join(kinds)}" for party, kinds in unseen)
                + ", so its events cannot be judged")
        return chk.fn(run, p)
    except Exception as exc:
        return Verdict(name, UNKNOWN, f"checker crashed: {type(exc).__name__}: {exc}",
                       notes=(traceback.format_exc(),))


def cut_text(run: RunRecord, cut: Event) -> str:
    """``history budget reached at N ms`` (from the run's first event), for a history cut at its budget."""
    first = run.first_t if run.first_t is not None else cut.t_ns
    return f"history budget reached at {max(0, cut.t_ns - first) // 1_000_000} ms"


ExpectEntry = str | tuple[str, Any] | tuple[str, Any, "str | None"]


def judge_all(run: RunRecord, expect: Iterable[ExpectEntry]) -> list[Verdict]:
    """The verdicts of an expect list on ``run``, in its order: the one reading of an expect list for every
    caller (a scenario's run, its re-judging from a report, the contract's checks, a test's cluster).  An entry
    is a checker's name, or (name, params), or (name, params, allow_unknown)."""
    out = []
    for entry in expect:
        name, params, allow = (entry, None, None) if isinstance(entry, str) else (*entry, None)[:3]
        out.append(judge(name, run, params, allow_unknown=allow))
    return out


def ok(name: str, message: str = "", notes: tuple[str, ...] = ()) -> Verdict:
    return Verdict(name, OK, message, notes=notes)


def violated(name: str, message: str, evidence: list[Event] | tuple[Event, ...] = (),
             notes: tuple[str, ...] = ()) -> Verdict:
    return Verdict(name, VIOLATED, message, tuple(evidence), notes)


def unknown(name: str, message: str) -> Verdict:
    return Verdict(name, UNKNOWN, message)


def not_judged(name: str, message: str) -> Verdict:
    return Verdict(name, NOT_JUDGED, message)
