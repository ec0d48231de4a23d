"""The event vocabulary of a history: one typed record per kind, the plug-in contract a target is written against.

Every event a history holds has a *kind* (past tense: ``stop_started``) and a small
dict of data.  :data:`KINDS` says, for each kind, which *party* emits it
(:data:`PARTIES`: the harness itself, the target's engine side, its worker side or
its listener), the data keys it must and may carry with their types, and what it
means.  A target adapter emits these names with these keys; a target that needs
kinds of its own declares them as :class:`EventKind` records in its ``events``
attribute (:func:`declare` registers them), documented the same way.

``docs/events.md`` is generated from this module (``python -m harness.events > docs/events.md``);
the JSON Schema of ``wait: {event: ...}`` takes its enum from it.  With
``LASTCALL_STRICT_EVENTS=1`` the recorder checks every event against it
(:func:`problems`) and a bad one makes the run broken, naming the event.

Format versions: :data:`FORMAT_VERSION` is written into every event (``v``).
Version 2 names a worker by ``worker`` (not ``label``) on the worker side's
allocator events; :func:`upgrade` maps a version-1 event's data onto version 2,
so stored histories are judged as new ones.

This module imports nothing of the harness: every layer may use it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EventKind", "KINDS", "PARTIES", "PARTY_CAPABILITIES", "OBSERVED_BY", "FORMAT_VERSION", "STRICT_ENV",
           "label", "declare", "kind_names", "problems", "upgrade", "absent_parties", "render_markdown",
           "BUDGET_KIND", "MAX_ID_CHARS", "ID_HEAD", "stored_id", "compact", "id_key"]

FORMAT_VERSION = 2  # bump when a kind's keys change meaning; add the mapping to upgrade()
STRICT_ENV = "LASTCALL_STRICT_EVENTS"  # "1": the recorder checks every event (set by lastcall's suite and CI)
BUDGET_KIND = "history_budget_reached"  # the last event of a history cut at its byte budget (harness.history)
# The longest request id an event stores whole; a longer one (a reply padded to 1 MB echoes its id) is stored
# as its digest, its size and its first ID_HEAD characters. The harness's own ids are at most about 80.
MAX_ID_CHARS = 128
ID_HEAD = 32  # characters of a long id kept beside its digest: enough for the step name it starts with

PARTIES: dict[str, str] = {
    "harness": "lastcall itself: the runner's steps, the launcher, the child-process runtime, failpoints, probes",
    "engine": "the target's engine side (``engine_side``), in the engine process",
    "worker": "the target's worker side (``worker_side``: registry, backend), in each worker process",
    "listener": "the target's listener(s): the worker listener, or a handshake listener in the engine",
}
# The capability by which a target says it emits a party's events; a target lacking it declares the party
# absent, and a checker that needs that party's events is then "not judged" instead of unknown.
PARTY_CAPABILITIES: dict[str, str] = {"engine": "engine_events", "worker": "worker_events",
                                      "listener": "listener_events"}

_TYPES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,),
                                       "list": (list, tuple), "dict": (dict,), "null": (type(None),),
                                       "any": (object,)}


def _fits(value: Any, spec: str) -> bool:
    for name in spec.split("|"):
        if name in ("int", "float") and isinstance(value, bool):
            continue  # True is an int to Python, not to a history
        if isinstance(value, _TYPES[name]):
            return True
    return False


@dataclass(frozen=True)
class EventKind:
    """One kind of event: its name, who emits it, its data keys (name -> type) and what it means.

    Types are ``str``, ``int``, ``float``, ``bool``, ``list``, ``dict``, ``null`` or ``any``,
    joined by ``|`` (``int|null``).  ``open``: keys beyond those listed are allowed (a step's
    own parameters, a probe's figures).
    """

    name: str
    party: str
    about: str
    required: Mapping[str, str] = field(default_factory=dict)
    optional: Mapping[str, str] = field(default_factory=dict)
    open: bool = False

    def __post_init__(self) -> None:
        if self.party not in PARTIES:
            raise ValueError(f"event kind {self.name!r}: party {self.party!r} is not one of {', '.join(PARTIES)}")
        for key, spec in {**self.required, **self.optional}.items():
            unknown = [t for t in spec.split("|") if t not in _TYPES]
            if unknown:
                raise ValueError(f"event kind {self.name!r}: key {key!r} has unknown type(s) {unknown}")

    def problems(self, data: Mapping[str, Any]) -> list[str]:
        """What is wrong with ``data`` for this kind (missing, mistyped or undeclared keys); [] when nothing."""
        out = [f"missing key {k!r} ({t})" for k, t in self.required.items() if k not in data]
        types = {**self.required, **self.optional}
        for key, value in data.items():
            spec = types.get(key)
            if spec is None:
                if not self.open:
                    out.append(f"undeclared key {key!r}")
            elif not _fits(value, spec):
                out.append(f"key {key!r} is {type(value).__name__} {value!r:.40}, expected {spec}")
        return out


def label(pp: int, rank: int) -> str:
    """The name of one worker (and of its listener) everywhere: ``pp0/rank1``."""
    return f"pp{pp}/rank{rank}"


# ----------------------------------------------------------------- the vocabulary
_L = {"listener": "str"}  # the listener's label; with the pid it names one listener
_LC = {"listener": "str", "conn": "int"}  # ... and a connection number, unique per listener
_OL = {"listener": "str"}  # optional on kinds a handshake listener emits without a label
_W = {"worker": "str"}  # the worker's label (pp0/rank1)
_STEP = {"step": "str"}  # the as: name of the step
# a request's id: whole, or (longer than MAX_ID_CHARS) its sha256, its size in bytes and its first characters
_ID = {"id": "int|str|null", "id_digest": "str", "id_size": "int", "id_head": "str"}


def _k(name: str, party: str, about: str, required: Mapping[str, str] | None = None,
       optional: Mapping[str, str] | None = None, *, open: bool = False) -> EventKind:
    return EventKind(name, party, about, dict(required or {}), dict(optional or {}), open)


_BUILTIN: tuple[EventKind, ...] = (
    # the listener: its life, its connections, its stop
    _k("listener_started", "listener", "a worker listener is serving on its socket",
       {**_L, "path": "str", "rank": "int", "pp": "int"}),
    _k("handshake_listener_started", "listener", "a handshake listener is bound and serving",
       {"host": "str", "port": "int"}),
    _k("bind_failed", "listener", "a handshake listener could not bind its port",
       {"host": "str", "port": "int", "error": "str"}),
    _k("stale_socket_removed", "listener", "a socket file left by a dead owner was removed before binding",
       {**_L, "path": "str"}),
    _k("accepted", "listener", "a connection was accepted", _LC),
    _k("accepted_after_stop", "listener", "a connection was accepted after stop began (a defect)", _LC),
    _k("accept_failed", "listener", "accept() raised (the reference records the first of a streak and pauses "
       "accepting)", {**_L, "error": "str"}),
    _k("peer_rejected", "listener", "a peer of another user was refused (SO_PEERCRED)",
       {**_L, "peer_pid": "int", "peer_uid": "int"}),
    _k("frame_started", "listener", "the first bytes of a request frame arrived on a connection", _LC),
    _k("frame_completed", "listener", "a whole request frame was read", _LC,
       {"after_stop": "bool", "cmd": "str|null"}),
    _k("bad_frame", "listener", "a frame's length prefix was malformed", {**_LC, "error": "str"}),
    _k("bad_request", "listener", "a frame's body was not a request", {**_LC, "error": "str"}),
    _k("dispatch_started", "listener", "a request entered the backend", {**_LC, "cmd": "str"}, _ID),
    _k("dispatch_finished", "listener", "a request left the backend", {**_LC, "cmd": "str"},
       {**_ID, "status": "str"}),
    _k("dispatch_refused", "listener", "a request was answered without dispatch (the listener is stopping)",
       {**_LC, "cmd": "str"}, _ID),
    _k("reply_failed", "listener", "a reply could not be sent", {"error": "str"}, {**_OL, "conn": "int"}),
    _k("connection_closed", "listener", "the listener closed a connection", _LC, {"why": "str"}),
    _k("handshake_served", "listener", "a handshake listener answered a metadata request",
       {"pp": "int", "tp": "int"}),
    _k("bad_handshake", "listener", "a handshake request was malformed", {"why": "str"}),
    _k("stop_started", "listener", "stop began on a listener (its first stop of a life)", {},
       {**_OL, "host": "str", "port": "int"}),
    _k("reads_cancelled", "listener", "reads in progress at stop were cancelled",
       {**_L, "n": "int", "conns": "list"}, {"by": "str"}),
    _k("drain_started", "listener", "stop waits for handlers inside the backend", {**_L, "timeout": "float|null"}),
    _k("drain_finished", "listener", "the drain ended; ok: every handler finished", {**_L, "ok": "bool"}),
    _k("teardown_step", "listener", "one step of a listener's teardown (close, unlink, rmdir, unlink_skipped)",
       {**_L, "step": "str"}, {"why": "str"}),
    _k("cleanup_failed", "listener", "a teardown step raised", {**_L, "error": "str"}),
    _k("stop_returned", "listener", "stop returned; ok: what it returned", {"ok": "bool"},
       {**_OL, "reason": "str", "took_ms": "float"}),
    _k("thread_crashed", "listener", "the serving thread died of an exception", {"error": "str"}, _OL),
    _k("thread_exited", "listener", "the serving thread ended", {}, _OL),
    _k("planted_delay_calibrated", "listener", "a benchmark arm calibrated its busy loop", _L, open=True),
    _k("planted_delay_measured", "listener", "a benchmark arm's busy loops, as measured",
       {**_L, "n": "int", "median_ns": "float"}),
    # the worker side: the registry of listeners and the backend
    _k("stop_all_returned", "worker", "the registry's stop of every listener returned",
       {"ok": "bool", "left": "int"}),
    _k("listener_registered", "worker", "a started listener entered its registry (kept there until it stops)",
       {**_L, "ipc": "str"}),
    _k("listener_unregistered", "worker", "a listener left its registry (its stop returned True, or a restart "
       "replaced it)", {**_L, "ipc": "str"}),
    _k("exit_hook_started", "worker", "the exit hook began stopping what is left",
       {"listeners": "int", "budget": "float|null"}),
    _k("exit_hook_finished", "worker", "the exit hook ended", {"ok": "bool", "left": "int"}),
    _k("teardown_deferred", "worker", "the allocator's teardown was put off: a listener had not stopped", _W),
    _k("allocator_state", "worker", "what the allocator held just before teardown",
       {**_W, "mapped": "list"}, {"pending": "any"}),
    _k("allocator_torn_down", "worker", "the allocator was torn down", _W),
    # the harness: steps of the scenario, client-side faults, processes, failpoints
    _k("step_started", "harness", "a step of the scenario began; category: what it does (harness.categories)",
       {**_STEP, "kind": "str"}, {"category": "str"}, open=True),
    _k("step_returned", "harness", "a step ended; ok: without error, value: what it returned",
       {**_STEP, "kind": "str", "ok": "bool"},
       {"category": "str", "value": "any", "error": "str|null", "error_class": "str|null"},
       open=True),
    _k("step_failed", "harness", "a step could not be performed; the run stops; waited_for: the event kind a wait "
       "that timed out waited for", {"error": "str"}, {"waited_for": "str"}),
    _k("host_measured", "harness", "how slow the machine was for the harness while it launched the run: the share "
       "of a CPU its thread got while it could run, and the factor that stretches the steps' safety-net timeouts",
       {"cpu_share": "float", "slowness": "float"}),
    _k("armed", "harness", "a failpoint was armed by a step",
       {**_STEP, "site": "str", "pid": "int", "action": "str"}, {"since_ns": "int"}),
    _k("peer_stalled", "harness", "a client-side fault left a request unfinished", {**_STEP, "fault": "str"}),
    _k("peer_closed", "harness", "the listener closed a connection the harness watched", _STEP),
    _k("peer_finished", "harness", "the harness finished a withheld request", _STEP),
    _k("peer_idle", "harness", "idle connections were opened", {**_STEP, "count": "int"}),
    _k("peer_flood", "harness", "a flood of connections was opened", {**_STEP, "count": "int"}),
    _k("path_removed", "harness", "a step removed a path of the listener", {**_STEP, "path": "str", "what": "str"}),
    _k("path_replaced", "harness", "a step replaced a path of the listener; ino: the replacement's inode",
       {**_STEP, "path": "str"}, {"ino": "int"}),
    _k("fd_limit_lowered", "harness", "a step lowered a process's descriptor limit to the descriptors it holds: its "
       "next accept fails with EMFILE (was: the limit before)", {**_STEP, "pid": "int", "limit": "int", "was": "int"}),
    _k("fd_limit_restored", "harness", "a step put back a process's descriptor limit", {**_STEP, "pid": "int"}),
    _k("stress_schedule", "harness", "a stress step's schedule, chosen by its seed before it plays: one entry per "
       "round (racing point, failpoint action and delay, clients, requests; harness.scenario.stress)",
       {**_STEP, "seed": "int", "rounds": "list"}),
    _k("stress_round", "harness", "a round of a stress step ended: what its clients got (ok, refused, closed, bad)",
       {**_STEP, "round": "int", "point": "str"}, {"clients": "dict", "stops": "list"}, open=True),
    _k("hammer_finished", "harness", "the peer's back-to-back handshakes ended", {"ok": "int|bool", "failed": "int"},
       open=True),
    _k("second_stop_returned", "harness", "a contract check's second stop returned", {"ok": "bool"}),
    _k("process_spawned", "harness", "a worker or engine process started",
       {"pid": "int", "role": "str", "label": "str"}),
    _k("process_exited", "harness", "a process of the run was reaped; status: its exit code", {"status": "int"}),
    _k("process_resources", "harness", "a process's threads and file descriptors at a point of its life",
       {"when": "str"}, {"threads": "list", "fds": "list"}, open=True),
    _k("exit_requested", "harness", "a process was asked to exit", {"reason": "str"}, {"shutdown": "bool|null"}),
    _k("main_returned", "harness", "a process's main function returned", {"reason": "str"}),
    _k("stop_from_handler_returned", "harness", "a stop called from a handler returned",
       {"ok": "bool", "seconds": "float"}),
    _k("thread_exception", "harness", "a thread of a process died of an exception", {}, open=True),
    _k("engine_died", "harness", "a worker saw its engine die"),
    _k("fault_armed", "harness", "a process armed a failpoint site", {"site": "str", "action": "str"},
       {"count": "int|null"}),
    _k("fault_reached", "harness", "a failpoint site was hit", {"site": "str", "action": "str", "hit": "int"}),
    _k("fault_released", "harness", "a paused failpoint site was released", {"site": "str", "hits": "int"}),
    _k("watchdog_fired", "harness", "the run passed its deadline and is killed as hung (deadline_s: the bound it fired "
       "at, config_s x scale + launches x launch_s: the scenario's config.deadline, LASTCALL_TIMEOUT_SCALE, an "
       "engine run's launch allowances)", {"deadline_s": "float"},
       {"config_s": "float", "scale": "float", "launches": "int", "launch_s": "float"}),
    _k(BUDGET_KIND, "harness", "the history reached its byte budget: no event after this one was stored, and the "
       "run was ended (budget: the budget in bytes; stored: the bytes stored before this event)",
       {"budget": "int", "stored": "int"}),
    _k("stacks", "harness", "a hung process's thread stacks", {"label": "str", "pid": "int", "text": "str"}),
    _k("sigterm_sent", "harness", "a process was sent SIGTERM", {"label": "str", "pid": "int"}),
    _k("sigkill_sent", "harness", "processes were sent SIGKILL", {"labels": "list"}, {"reason": "str"}),
    _k("strays_killed", "harness", "processes of the run's group that outlived it were killed", {"pids": "list"}),
    # a real engine's process tree (harness.scenario.engine_steps), launched and judged from outside
    _k("engine_launched", "harness", "an engine command was launched in a session of its own; argv: its "
       "arguments, env: the target flags' variables, launcher: exec (the command exec'd) or zygote (a fork of a "
       "process that preloaded its modules runs its script)", {"pid": "int", "port": "int", "launch": "int"},
       {"argv": "list", "env": "dict", "launcher": "str"}),
    _k("engine_ready", "harness", "the engine printed its ready line; members: its processes then; owners: each "
       "/dev/shm segment or semaphore they held, by pid", {"pid": "int", "ready_s": "float", "members": "list"},
       {"shm": "list", "owners": "dict"}),
    _k("engine_start_failed", "harness", "the engine exited before it was ready, or was not ready in time (hung: "
       "neither ready nor gone at the bound; its stacks were taken, then it was stopped)", {"error": "str"},
       {"launch": "int", "seconds": "float", "hung": "bool", "status": "int|null", "tail": "str", "failure_s": "float",
        "fix": "str", "members": "list", "shm": "list", "owners": "dict", "gone_after_sigterm": "bool",
        "killed": "list"}),
    _k("engine_stream_started", "harness", "a streaming request got its first event", _STEP),
    _k("engine_client_stalled", "harness", "a streaming request stopped reading after events (its connection kept "
       "open until the tree is gone)", {**_STEP, "events": "int"}),
    _k("engine_client_disconnected", "harness", "a streaming request closed its connection mid-stream after events",
       {**_STEP, "events": "int"}),
    _k("engine_shutdown_began", "harness", "the engine's own line said its shutdown began (after the engine_signal "
       "step)", {**_STEP, "line": "str"}),
    _k("engine_starting", "harness", "a launch that does not wait for ready is starting (gated: the stand-in's "
       "engine core waits on the harness's start gate)", {**_STEP, "gated": "bool"}, {"launched": "bool"}),
    # the pause nemesis (harness.launch.pauses): SIGSTOP of one process, SIGCONT before any kill or at its bound
    _k("process_paused", "harness", "the harness paused one process (SIGSTOP; not its group) by a pause step: it "
       "is resumed by a resume step, at its bound (seconds), before any signal or kill the harness sends it, or "
       "at the end of the run's steps", {**_STEP, "pid": "int", "process": "str", "bound": "float"}),
    _k("process_resumed", "harness", "the harness resumed a process it paused (SIGCONT), before any kill of it; "
       "reason: step (a resume step), bound (its pause's bound passed), before_kill (the harness was about to "
       "signal or kill it) or run_end (the run's steps ended); alive: whether it was still there to resume",
       {"pid": "int", "process": "str", "reason": "str", "paused_by": "str", "paused_s": "float", "alive": "bool"},
       {**_STEP}),
    _k("engine_process_exited", "harness", "a process of the engine tree exited, seen by the harness as it happened "
       "from the first signal on (its pidfd readable; one that exited between two reads of the tree, at the later "
       "read); name: its process name", {"pid": "int", "name": "str"}),
    _k("engine_closed", "harness", "the harness ended an engine tree: terminated (SIGTERM), then killed (SIGKILL) "
       "what was still alive, and removed the /dev/shm segments it held that outlived it",
       {"killed": "list"}, {"terminated": "list", "removed": "list"}),
    # a chained engine run (harness.scenario.chain): several scenarios, each judged on its own window
    _k("chain_item_began", "harness", "a scenario of a chained run begins: its window of the history starts here",
       {"index": "int", "scenario": "str", "of": "int", "run": "str"}),
    _k("chain_item_ended", "harness", "a scenario of a chained run ended: its window of the history ends here",
       {"index": "int", "scenario": "str", "run": "str"}),
    _k("engine_handed", "harness", "a chained run's scenario starts on the untouched, ready engine the scenario "
       "before restarted (launch, its API server's pid, its ready time) instead of a launch of its own",
       {"launch": "int", "pid": "int", "ready_s": "float", "giver": "str"}),
)

KINDS: dict[str, EventKind] = {k.name: k for k in _BUILTIN}
BUILTIN_NAMES: frozenset[str] = frozenset(KINDS)

# The kinds whose presence proves a party was observed in a run (a checker that needs a party's events is
# unknown without one of them).  The harness is always observed: its steps are recorded by lastcall itself.
OBSERVED_BY: dict[str, tuple[str, ...]] = {
    "listener": ("listener_started", "handshake_listener_started", "stop_started"),
    "worker": ("stop_all_returned", "exit_hook_started", "allocator_state", "allocator_torn_down",
               "teardown_deferred"),
    "engine": (),
}


def declare(kinds: Iterable[EventKind]) -> None:
    """Register a target's own kinds (its ``events`` attribute); a built-in name cannot be redefined."""
    for k in kinds:
        if not isinstance(k, EventKind):
            raise TypeError(f"a target's events are harness.events.EventKind records, not {type(k).__name__}")
        old = KINDS.get(k.name)
        if old is not None and old != k:
            raise ValueError(f"event kind {k.name!r} is already declared differently ({old.party}: {old.about})")
        KINDS[k.name] = k


def kind_names() -> tuple[str, ...]:
    """Every known kind, sorted (the built-in ones and any a target declared)."""
    return tuple(sorted(KINDS))


def problems(kind: str, data: Mapping[str, Any]) -> list[str]:
    """What is wrong with one event: an unknown kind, or its keys; [] when it fits the vocabulary."""
    spec = KINDS.get(kind)
    if spec is None:
        return ["unknown kind (declare it in the target's events: harness.events.EventKind)"]
    return spec.problems(data)


_V1_RENAMED: dict[str, dict[str, str]] = {  # kind -> {version-1 key: version-2 key}
    "teardown_deferred": {"label": "worker"},
    "allocator_state": {"label": "worker"},
    "allocator_torn_down": {"label": "worker"},
}


def upgrade(kind: str, data: dict[str, Any], v: int) -> dict[str, Any]:
    """``data`` of an event written in format ``v``, as format :data:`FORMAT_VERSION` has it."""
    if v <= 1:
        renames = _V1_RENAMED.get(kind, {})
        data = {renames.get(k, k): val for k, val in data.items()}
    return data


def stored_id(rid: object) -> dict[str, Any]:
    """The keys an event stores for request id ``rid``: ``{"id": rid}``, or for a text longer than
    :data:`MAX_ID_CHARS` its sha256 (``id_digest``), its size in UTF-8 bytes (``id_size``) and its first
    :data:`ID_HEAD` characters (``id_head``): the history keeps which request it was, never its padding."""
    if not isinstance(rid, str) or len(rid) <= MAX_ID_CHARS:
        return {"id": rid}
    raw = rid.encode("utf-8", "surrogatepass")
    return {"id_digest": "sha256:" + hashlib.sha256(raw).hexdigest(), "id_size": len(raw), "id_head": rid[:ID_HEAD]}


def compact(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with a long ``id`` replaced by :func:`stored_id`'s keys (``data`` itself when it has none)."""
    rid = data.get("id")
    if not isinstance(rid, str) or len(rid) <= MAX_ID_CHARS:
        return data
    return {**{k: v for k, v in data.items() if k != "id"}, **stored_id(rid)}


def id_key(data: Mapping[str, Any]) -> object:
    """What identifies the request of an event's ``data``: its id, or the digest of a long one (compare it with
    ``id_key(stored_id(rid))``)."""
    return data.get("id_digest") or data.get("id")


def absent_parties(capabilities: Iterable[str]) -> frozenset[str]:
    """The parties a target with these capabilities declares absent (it emits none of their events)."""
    caps = set(capabilities)
    return frozenset(p for p, cap in PARTY_CAPABILITIES.items() if cap not in caps)


# ----------------------------------------------------------------- the reference page
def _keys(k: EventKind) -> str:
    def t(spec: str) -> str:
        return spec.replace("|", " or ")  # a bare | would split the table's cell

    parts = [f"`{n}` {t(v)}" for n, v in k.required.items()] + [f"`{n}`? {t(v)}" for n, v in k.optional.items()]
    if k.open:
        parts.append("...")
    return ", ".join(parts) or "-"


def render_markdown(kinds: Iterable[EventKind] | None = None) -> str:
    """docs/events.md: every kind by party, with its keys (``?``: optional; ``...``: more allowed)."""
    chosen = sorted(kinds if kinds is not None else (KINDS[n] for n in BUILTIN_NAMES), key=lambda k: k.name)
    out = ["# Events", "",
           "<!-- generated by `python -m harness.events > docs/events.md`; a test checks it is current -->", "",
           "A history is a list of events, each with `t_ns` (CLOCK_MONOTONIC), `pid`, `role`, `rank` (the",
           "process's label, `pp0/rank1`), `thread`, `kind`, `data` and the format version `v` "
           f"(now {FORMAT_VERSION}).",
           "A target's adapter emits these kinds with these keys; kinds of its own it declares as",
           "`harness.events.EventKind` records in its `events` attribute.  With `LASTCALL_STRICT_EVENTS=1`",
           "every event is checked against this table and a bad one makes the run broken.", "",
           "Keys: `name` type (required), `name`? type (optional), `...` (other keys allowed); types are str,",
           "int, float (an int too), bool, list, dict, null or any.  A target documents its own kinds the same way:",
           "`harness.events.render_markdown(MyTarget.events)`.", "",
           f"A request id longer than {MAX_ID_CHARS} characters is never stored whole: an event keeps `id_digest` "
           "(its sha256),", f"`id_size` (its size in bytes) and `id_head` (its first {ID_HEAD} characters) instead. "
           "A history has a byte budget", "(docs/limits.md): the recorder stores no event past it, and a history "
           f"cut there ends with `{BUDGET_KIND}`.", ""]
    for party, about in PARTIES.items():
        mine = [k for k in chosen if k.party == party]
        out += [f"## {party}", "", f"Emitted by {about}.", ""]
        if party in PARTY_CAPABILITIES:
            proof = ", ".join(f"`{n}`" for n in OBSERVED_BY.get(party, ())) or "none yet"
            out += [f"A target emits these when its capabilities include `{PARTY_CAPABILITIES[party]}`; "
                    f"the kinds that prove it observed in a run: {proof}.", ""]
        if not mine:
            out += ["(none)", ""]
            continue
        out += ["| kind | keys | meaning |", "|---|---|---|"]
        out += [f"| `{k.name}` | {_keys(k)} | {k.about} |" for k in mine]
        out.append("")
    out += ["## Format versions", "",
            "- 1: allocator events (`teardown_deferred`, `allocator_state`, `allocator_torn_down`) named the worker",
            "  by `label`.",
            "- 2: they name it by `worker`.  `lastcall report` reads version-1 histories through this mapping.", ""]
    return "\n".join(out)


if __name__ == "__main__":  # python -m harness.events > docs/events.md
    print(render_markdown(), end="")
