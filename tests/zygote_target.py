"""Engine targets for tests/test_zygote.py: the stand-in engine and one planted bug of it, launched from a zygote
that has preloaded the stand-in's module (as ``vllm_engine`` launches ``vllm serve``), not exec'd."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from harness.targets.vllm_engine import STANDIN, STANDIN_VARIANTS, EngineCommand, EngineTarget

_HERE = "tests.zygote_target"


@dataclass(frozen=True)
class Preloaded(EngineTarget):
    def engine_command(self, port: int, flags: Any = None) -> EngineCommand:
        return dataclasses.replace(super().engine_command(port, flags), preload=("harness.engine.standin",))


def _preloaded(base: EngineTarget, attr: str) -> Preloaded:
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    return Preloaded(**{**fields, "name": f"{_HERE}:{attr}"})


STANDIN_PRELOADED = _preloaded(STANDIN, "STANDIN_PRELOADED")
IGNORES_SIGTERM_PRELOADED = _preloaded(STANDIN_VARIANTS["engine_ignores_sigterm"], "IGNORES_SIGTERM_PRELOADED")
