"""The step kinds of a handshake run (cast ``handshake``): an engine owning a handshake listener, a peer.

The engine process (role ``hs_engine``) holds the listener of the handshake variant the run targets
(``reference`` is the correct one); the peer (``hs_peer``) handshakes with it.  Each step is recorded under
its own kind, with the category the checkers select on (harness.categories):

* ``handshake_start`` (category start: stop_result wants True once started, False on a typed error such as
  PortInUse), ``handshake_shutdown`` (stop), ``cycle`` (cycle: its value is the ports of its rounds);
* ``handshake`` a well-formed request (requests_served, survives_bad_input); ``malformed_handshake`` a
  request with fault ``garbage_body``, ``bad`` naming its kind (and ``says``, the text its error reply must
  hold, when the step names one; its value is the reply: ``{"status": "error", "error": ...}``, ``{"status":
  "ok"}`` when served as if well-formed, or ``{"status": None}`` with no reply); ``hammer`` / ``stop_hammer`` traffic.
* A shutdown (or cycle) that returns True is followed at once by a snapshot labelled ``after_<step>`` with a
  trial bind of the listener's ports, taken before the step's return is recorded (so ``wait: {returned:
  ...}`` implies it): port_released judges every ``after*`` snapshot.  The final ``after`` snapshot gets the
  same ports (harness.scenario.player: Player.used_ports).

A command that never answers (a start that hangs on a held port) fails its step once its safety net runs
out; the engine is SIGKILLed before the run ends, so a hung listener costs seconds, never a hung session.
Registered in harness.scenario.player's registry on import (harness.scenario.runner imports this module).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.launch.cluster import RemoteError
from harness.scenario.player import GRACE_S, Player, StepError, step_kind
from harness.timeouts import scaled

__all__ = ["HandshakeState"]

_ANSWERED = {False: ("error", "ok"), True: (None,)}  # the statuses a malformed step expects; oversized: no reply



@dataclass
class HandshakeState:
    """What a handshake run's steps share."""

    port: int = 0  # the port of the listener last started (0: none yet)
    join_timeout: float = 0.0  # the join bound of the listener last started: what bounds its shutdown
    hammering: str = ""  # the hammer step running, if any

    def __post_init__(self) -> None:
        self.join_timeout = self.join_timeout or scaled(5.0)


def _port_of(pl: Player, port: int | str) -> int:
    if isinstance(port, int):
        return port
    if port not in pl.ports:
        raise StepError(f"{port} holds no port (the step failed); nothing to start on")
    return pl.ports[port]


def _serving(pl: Player) -> int:
    port = pl.scratch(HandshakeState).port
    if not port:
        raise StepError("no handshake listener was started; start one first: - handshake_start: {as: l1}")
    return port


@step_kind("handshake_start")
def handshake_start(pl: Player, s: Any, name: str) -> None:
    st = pl.scratch(HandshakeState)
    port = _port_of(pl, s.port)
    args = {"port": port, "start_timeout": scaled(s.start_timeout), "join_timeout": scaled(s.join_timeout),
            "reuse": s.reuse}
    st.join_timeout = args["join_timeout"]
    ok, value = pl.command(name, "handshake_start", pl.proc("engine"), "start", args,
                           scaled(s.start_timeout) + scaled(GRACE_S), port=port)
    if ok:
        st.port = pl.ports[name] = int(value)


@step_kind("handshake")
def handshake(pl: Player, s: Any, name: str) -> None:
    port = _serving(pl)
    args = {"port": port, "pp": s.pp, "tp": s.tp, "within": scaled(s.within)}
    data = {"fault": "none", "port": port, "pp": s.pp, "tp": s.tp}
    if s.background:
        pl.commands(name, "handshake", [(pl.c.peer, "fetch", args)], lambda v: v[0], **data)
    else:
        pl.command(name, "handshake", pl.c.peer, "fetch", args, scaled(s.within) + scaled(GRACE_S), **data)


@step_kind("hammer")
def hammer(pl: Player, s: Any, name: str) -> None:
    st = pl.scratch(HandshakeState)
    if st.hammering:
        raise StepError(f"the peer is already hammering ({st.hammering}); one hammer per run")
    port = _serving(pl)
    st.hammering = name
    pl.command(name, "hammer", pl.c.peer, "hammer", {"port": port}, pl.timeout(), port=port)


@step_kind("stop_hammer")
def stop_hammer(pl: Player, target: str, name: str) -> None:
    pl.command(name, "stop_hammer", pl.c.peer, "stop_hammering", {}, pl.timeout(), hammer=target)


@step_kind("malformed_handshake")
def malformed_handshake(pl: Player, s: Any, name: str) -> None:
    port = _serving(pl)
    says = {} if s.says is None else {"says": s.says}
    pl.command(name, "malformed_handshake", pl.c.peer, "bad", {"port": port, "kind": s.kind, "detail": True,
                                                               "within": scaled(s.within)},
               scaled(s.within) + scaled(GRACE_S), ok_if=lambda v: v.get("status") in _ANSWERED[s.kind == "oversized"],
               fault="garbage_body", bad=s.kind, port=port, **says)


@step_kind("handshake_shutdown")
def handshake_shutdown(pl: Player, s: Any, name: str) -> None:
    st = pl.scratch(HandshakeState)
    bound = st.join_timeout + scaled(GRACE_S)  # a shutdown that outlives its own join bound (and a grace) hangs
    pl.commands(name, "handshake_shutdown", [(pl.proc("engine"), "shutdown", {"unstarted": s.unstarted})],
                lambda v: v[0], timeout=bound,
                probe=True, stuck=True, join=bound + scaled(pl.cfg.ipc_timeout), port=st.port)


@step_kind("cycle")
def cycle(pl: Player, s: Any, name: str) -> None:
    st = pl.scratch(HandshakeState)
    eng = pl.proc("engine")
    pl.started(name, "cycle", n=s.n)
    try:
        value = eng.call("cycle", n=s.n, port=s.port, timeout=pl.timeout())
    except RemoteError as exc:
        pl.failed(name, "cycle", eng, exc, n=s.n)
        return
    ports = [int(p) for p in value]
    st.port = pl.ports[name] = ports[-1]  # before the probe: its trial bind covers the port
    pl.returned(name, "cycle", True, ports, probe=True, n=s.n)
