"""The value types a scenario file is written in: durations, sizes, names, workers, matrix axes.

Every type validates with a message in the loader's style ("expected ..., found ...")
and carries a JSON Schema that accepts what people write (``500ms``, ``2MiB``), so an
editor completing a scenario file and the loader agree.  Every number is bounded:
durations by :data:`MAX_SECONDS`, sizes by :data:`MAX_SIZE`, tp and pp by
:data:`MAX_RANKS`, a topology matrix by :data:`MAX_POINTS` runs (README, Limits).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, WithJsonSchema

from harness.events import label
from harness.units import parse_duration, parse_size

__all__ = [
    "Strict", "Duration", "Size", "ScenarioName", "StepName", "MarkName", "TargetName", "SiteName",
    "Worker", "WORKER_0", "WorkerOrEngine", "WorkerOrAll", "IntAxis", "DeviceAxis", "Device",
    "DURATION_SCHEMA", "SIZE_SCHEMA", "AS_DESCRIPTION", "MAX_SECONDS", "MAX_SIZE", "MAX_RANKS", "MAX_POINTS",
    "MAX_COUNT", "MAX_NAME", "MAX_TARGET", "MAX_IPC", "IpcName",
]

MAX_SECONDS = 3600.0  # the longest duration: 1h (every timeout in a scenario is a safety net of seconds)
MAX_SIZE = 1 << 30  # the largest size: 1 GiB (offsets and the KV capacity of a CPU run)
MAX_RANKS = 64  # the largest tp and the largest pp (and tp x pp, the workers of one run): tp 8 x pp 8 fits
MAX_POINTS = 32  # the most runs one topology matrix expands to
MAX_COUNT = 10_000  # the largest count of connections, hits, waves or pages
MAX_NAME = 64  # the longest scenario, step, mark or site name: each is stored in events; the library's is 50
MAX_TARGET = 200  # the longest target or planted bug (module:attribute): a dotted module path and a name
MAX_IPC = 32  # the longest instance name (ipc): it is part of a socket path, which sun_path bounds

DURATION_SCHEMA: dict[str, Any] = {  # what an editor accepts where seconds are meant
    "anyOf": [{"type": "number", "minimum": 0, "maximum": 3600},
              {"type": "string", "pattern": r"^\s*(\d+(\.\d*)?|\.\d+)\s*(ns|us|ms|s|m|min|h)?\s*$",
               "description": "at most 1h (3600 seconds)"}],
    "title": "duration", "examples": ["500ms", "2s", 1.5],
}
SIZE_SCHEMA: dict[str, Any] = {  # what an editor accepts where bytes are meant
    "anyOf": [{"type": "integer", "minimum": 0, "maximum": 1 << 30},
              {"type": "string", "pattern": r"^\s*(\d+(\.\d*)?|\.\d+)\s*([KkMmGgTt]i?[Bb]?|[Bb])?\s*$",
               "description": "at most 1GiB (1073741824 bytes)"}],
    "title": "size", "examples": ["2MiB", "64MiB", 4096],
}
AS_DESCRIPTION = "names this step, so a later wait, release, finish or an expect entry can refer to it"
T = TypeVar("T")


class Strict(BaseModel):
    """Base of every scenario model: unknown keys are errors, values are frozen after load."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _seconds(value: object) -> object:
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        seconds = parse_duration(value)  # ConfigError is a ValueError: the loader reports its text
        if seconds > MAX_SECONDS:
            raise ValueError(f"duration {value!r} is over lastcall's limit of 1h (3600 seconds); a scenario's "
                             f"timeouts are safety nets of seconds: write e.g. '30s'")
        return seconds
    return value


def _bytes(value: object) -> object:
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        size = parse_size(value)
        if size > MAX_SIZE:
            raise ValueError(f"size {value!r} is over lastcall's limit of 1GiB (1073741824 bytes); "
                             f"write a smaller size, e.g. '64MiB'")
        return size
    return value


Duration = Annotated[float, BeforeValidator(_seconds), WithJsonSchema(DURATION_SCHEMA)]
Size = Annotated[int, BeforeValidator(_bytes), WithJsonSchema(SIZE_SCHEMA)]


def _matches(regex: str, what: str, example: str) -> Callable[[str], str]:
    """A check that ``regex`` matches the whole value; the error says ``what`` and gives ``example``."""
    compiled = re.compile(regex)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(f"expected {what} (e.g. {example}), found {value!r}")
        return value

    return check


def _schema_pattern(regex: str, longest: int = MAX_NAME) -> Any:
    return Field(max_length=longest, json_schema_extra={"pattern": f"^(?:{regex})$"})


_SCENARIO_RE = r"[a-z0-9]+(?:-[a-z0-9]+)*"
_IDENT_RE = r"[A-Za-z_][A-Za-z0-9_]*"
_TARGET_RE = r"[a-z][a-z0-9_]*|[A-Za-z_][\w.]*:[A-Za-z_][\w.]*"
_SITE_RE = r"[a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)*"
ScenarioName = Annotated[str, AfterValidator(_matches(
    _SCENARIO_RE, "lower-case letters, digits and single dashes", "'stalled-read-is-cancelled'")),
    _schema_pattern(_SCENARIO_RE)]
StepName = Annotated[str, AfterValidator(_matches(_IDENT_RE, "a name of letters, digits and '_'", "r1 or f_pause")),
                     _schema_pattern(_IDENT_RE)]
MarkName = Annotated[str, AfterValidator(_matches(_IDENT_RE, "a pytest mark name", "slow")),
                     _schema_pattern(_IDENT_RE)]
TargetName = Annotated[str, AfterValidator(_matches(
    _TARGET_RE, "a target name or module:attribute", "'reference' or 'mypkg.targets:MINE'")),
    _schema_pattern(_TARGET_RE, MAX_TARGET)]


def _not_dots(value: str) -> str:
    if not value.strip("."):
        raise ValueError(f"{value!r} is made only of dots: an instance's name is a directory under the run's root, "
                         "and '.' or '..' would name the root or the directory above it; write e.g. 'other'")
    return value


_IPC_RE = r"[A-Za-z0-9_.-]+"
# an instance's name under the run's root: letters, digits, '_', '.' and '-', not only dots
IpcName = Annotated[str, Field(min_length=1, max_length=MAX_IPC, pattern=f"^{_IPC_RE}$",
                               json_schema_extra={"not": {"pattern": r"^\.+$"}}), AfterValidator(_not_dots)]
SiteName = Annotated[str, AfterValidator(_matches(
    _SITE_RE, "a failpoint site: dotted lower-case words", "backend.map_to_kv_tensors")),
    _schema_pattern(_SITE_RE)]


class Worker(Strict):
    """One worker process: tensor-parallel rank and pipeline stage."""

    rank: int = Field(0, ge=0, lt=MAX_RANKS, description="tensor-parallel rank, 0 <= rank < tp")
    pp: int = Field(0, ge=0, lt=MAX_RANKS, description="pipeline stage, 0 <= pp < topology.pp")

    @property
    def label(self) -> str:
        return label(self.pp, self.rank)


WORKER_0 = Worker.model_validate({})  # rank 0 of pipeline stage 0: the default wherever a worker is named


def _mapping_or_name(value: object) -> str:
    return "Name" if isinstance(value, str) else "Worker"


# A worker mapping ({rank, pp}), or one fixed word; the tags are capitalised so they never match a YAML key.
WorkerOrEngine = Annotated[
    Annotated[Worker, Tag("Worker")] | Annotated[Literal["engine"], Tag("Name")],
    Discriminator(_mapping_or_name),
]
WorkerOrAll = Annotated[
    Annotated[Worker, Tag("Worker")] | Annotated[Literal["all"], Tag("Name")],
    Discriminator(_mapping_or_name),
]


def _distinct(values: list[T]) -> list[T]:
    seen: list[T] = []
    for v in values:
        if v in seen:
            raise ValueError(f"expected distinct values, found {v!r} twice")
        seen.append(v)
    return values


def _one_or_list(value: object) -> str:
    return "List" if isinstance(value, list) else "One"


Device = Literal["cpu", "cuda"]
PositiveInt = Annotated[int, Field(ge=1, le=MAX_RANKS)]  # a tp or pp size
_IntList = Annotated[list[PositiveInt], Field(min_length=1, max_length=MAX_POINTS), AfterValidator(_distinct),
                     Tag("List")]
_DeviceList = Annotated[list[Device], Field(min_length=1), AfterValidator(_distinct), Tag("List")]
IntAxis = Annotated[Annotated[PositiveInt, Tag("One")] | _IntList, Discriminator(_one_or_list)]
DeviceAxis = Annotated[Annotated[Device, Tag("One")] | _DeviceList, Discriminator(_one_or_list)]
