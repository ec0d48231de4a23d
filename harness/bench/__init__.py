"""Benchmark helpers: interleaved-window A/B measurement and a bare baseline listener."""

from __future__ import annotations
