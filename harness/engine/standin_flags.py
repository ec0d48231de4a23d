"""The stand-in engine's command line (harness.engine.standin): vLLM's flags parsed and bounded, into the
:class:`Options` of one launch that every part of its tree reads.

Only the standard library: the stand-in starts in well under a second.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Options", "side_channel", "seconds", "bounded"]


@dataclass(frozen=True)
class Options:
    """One launch's options, as the command line gave them."""

    variant: str = "standin"
    interval: float = 0.01  # seconds per generated token
    tp: int = 1  # --tensor-parallel-size
    shutdown_timeout: float = 0  # --shutdown-timeout
    side_channel: tuple[str, int] | None = None  # NIXL's side channel (host, port), with NixlConnector


def side_channel(kv_config: str | None) -> tuple[str, int] | None:
    """NIXL's side channel when --kv-transfer-config names NixlConnector, from vLLM's variables.

    Error handling: ValueError with a one-line message for bad JSON or a bad port."""
    if kv_config is None:
        return None
    try:
        cfg = json.loads(kv_config)
    except ValueError as exc:
        raise ValueError(f"--kv-transfer-config is not JSON: {exc}") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"--kv-transfer-config is a JSON object, found {kv_config!r}")
    if cfg.get("kv_connector") != "NixlConnector":
        return None
    host = os.environ.get("VLLM_NIXL_SIDE_CHANNEL_HOST", "localhost")
    raw = os.environ.get("VLLM_NIXL_SIDE_CHANNEL_PORT", "5600")
    try:
        port = int(raw)
    except ValueError:
        raise ValueError(f"VLLM_NIXL_SIDE_CHANNEL_PORT={raw!r} is not a port number") from None
    if not 0 < port < 65536:
        raise ValueError(f"VLLM_NIXL_SIDE_CHANNEL_PORT={raw!r} is not a port number (1 to 65535)")
    return host, port


def seconds(low: float, high: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = float(text)
        if not low <= value <= high:  # nan fails too
            raise argparse.ArgumentTypeError(f"{value} is not from {low:g} to {high:g}")
        return value
    parse.__name__ = "seconds"
    return parse


def bounded(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not from {low} to {high}")
        return value
    parse.__name__ = "int"
    return parse
