"""The scenario schema: one YAML file is one :class:`Scenario`.

::

    name: stalled-read-is-cancelled
    about: A request whose body never arrives is not dispatched after stop returns.
    catches: [no_conn_tracking]
    topology: {tp: [1, 2], pp: 1, device: cpu}      # lists expand into a matrix
    config: {drain_timeout: 500ms}
    steps:
      - start: cluster
      - send: {to: {rank: 0}, cmd: map_to_kv_tensors, offsets: [0, 2MiB], fault: stall_after_header, as: r1}
      - stop: {as: s1}
      - wait: {returned: s1}
      - finish: r1
    expect:
      - stop_result: {step: s1, returns: true}
      - no_late_dispatch

:func:`json_schema` is what ``lastcall schema`` prints, for editors.
"""

from __future__ import annotations

import copy
import functools
import operator
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Discriminator, Field, PrivateAttr, Tag, create_model, model_validator
from pydantic.fields import FieldInfo

from harness.checkers.params import CHECKER_PARAMS, Params
from harness.scenario.fields import (
    MAX_POINTS,
    MAX_RANKS,
    DeviceAxis,
    Duration,
    IntAxis,
    MarkName,
    ScenarioName,
    Size,
    Strict,
    TargetName,
)
from harness.scenario.handshake_spec import PortOrHeld
from harness.scenario.steps import Step

SideChannelPort = PortOrHeld  # a port number, or the name of a hold_port step

__all__ = ["Scenario", "Topology", "Config", "ExpectBase", "EXPECT_TYPES", "json_schema"]

MIB = 1 << 20  # bytes in a MiB
MAX_STEPS = 1000  # the longest list of steps (and of expect entries, catches, marks)
MAX_SEED = (1 << 63) - 1
MAX_SHUTDOWN_S = 600  # the longest --shutdown-timeout a scenario may give an engine
MAX_REASON = 500  # the longest allow_unknown reason: it is copied into its verdict, on every run of the matrix
def _checker_list(value: object) -> object:
    if isinstance(value, str):
        raise ValueError(f"expected a list of checker names, e.g. [{value}], found {value!r}")
    if not isinstance(value, list):
        raise ValueError(f"expected a list of the checkers that must fire for this bug, e.g. [reads_cancelled], "
                         f"found {'nothing' if value is None else repr(value)}")
    return value


# the checkers one of which must fire for a bug (catches' mapping form); the names are checked in refs
CatchCheckers = Annotated[list[str], Field(min_length=1, max_length=MAX_STEPS), BeforeValidator(_checker_list)]
CatchList = Annotated[list[TargetName], Field(min_length=1, max_length=MAX_STEPS)]
CatchMap = Annotated[dict[TargetName, CatchCheckers], Field(min_length=1, max_length=MAX_STEPS)]


def _catches_form(value: object) -> str | None:
    return "catch-list" if isinstance(value, list) else "catch-mapping" if isinstance(value, dict) else None


Catches = Annotated[Annotated[CatchList, Tag("catch-list")] | Annotated[CatchMap, Tag("catch-mapping")],
                    Discriminator(_catches_form, custom_error_type="catches_form",
                                  custom_error_message="catches is a list of planted bugs or a mapping of each "
                                  "bug to the checkers that must fire for it")]


class Topology(Strict):
    """The processes of a run: tp x pp workers on a device. A list expands into a matrix of runs."""

    tp: IntAxis = Field(1, description="tensor-parallel size, or a list of sizes (one run each)")
    pp: IntAxis = Field(1, description="pipeline-parallel stages, or a list of them (one run each)")
    device: DeviceAxis = Field("cpu", description="cpu or cuda, or a list of both (one run each)")

    @model_validator(mode="after")
    def _bounded(self) -> Topology:
        axes = self.axes()
        workers = max(axes["tp"]) * max(axes["pp"])
        if workers > MAX_RANKS:
            raise ValueError(f"tp x pp = {workers} worker processes in one run, over lastcall's limit of "
                             f"{MAX_RANKS}; use smaller sizes (tp 8 x pp 8 fits)")
        points = len(axes["tp"]) * len(axes["pp"]) * len(axes["device"])
        if points > MAX_POINTS:
            raise ValueError(f"the matrix expands to {points} runs, over lastcall's limit of {MAX_POINTS}; "
                             f"list fewer sizes, or split the scenario")
        return self

    def axes(self) -> dict[str, list[Any]]:
        """Each axis as a list, in matrix order (tp, pp, device)."""
        return {k: v if isinstance(v, list) else [v] for k, v in (("tp", self.tp), ("pp", self.pp),
                                                                  ("device", self.device))}


class Config(Strict):
    """Settings of the target under test. Durations are written 500ms or 2s, sizes 64MiB."""

    drain_timeout: Duration = Field(5.0, description="how long stop waits for a handler inside the backend")
    exit_budget: Duration | None = Field(None, description="exit hook's drain budget; default the target's")
    deadline: Duration = Field(60.0, gt=0, description=(
        "the watchdog's bound for the whole run: past it every process's stacks are taken, every process is "
        "killed and the outcome is hung; times LASTCALL_TIMEOUT_SCALE, plus an engine run's launch allowances "
        "(docs/scenarios.md, The watchdog)"))
    capacity: Size = Field(64 * MIB, description="KV address space of group 0, e.g. 64MiB")
    ipc_timeout: Duration = Field(10.0, gt=0, description="client-side request timeout; the default wait timeout")
    # engine targets (vllm_engine, engine_standin): flags of the launch, under vLLM's own names (tp: topology.tp)
    shutdown_timeout: Duration | None = Field(None, ge=0, le=MAX_SHUTDOWN_S, description=(
        "engine targets: vLLM's --shutdown-timeout, whole seconds (how long SIGTERM lets requests in flight "
        "finish; 0 aborts them); default vLLM's own"))
    kv_connector: Literal["NixlConnector"] | None = Field(None, description=(
        "engine targets: --kv-transfer-config's kv_connector (kv_role kv_both); default none"))
    side_channel_port: SideChannelPort | None = Field(None, description=(
        "engine targets with kv_connector: VLLM_NIXL_SIDE_CHANNEL_PORT, a port number or the as: name of a "
        "hold_port step before start (the port it holds); default a free port of the run"))

    @model_validator(mode="after")
    def _engine_flags(self) -> Config:
        if self.shutdown_timeout is not None and self.shutdown_timeout != int(self.shutdown_timeout):
            raise ValueError(f"shutdown_timeout is whole seconds (vLLM's --shutdown-timeout is an int), found "
                             f"{self.shutdown_timeout:g}s")
        if self.side_channel_port is not None and self.kv_connector is None:
            raise ValueError("side_channel_port needs kv_connector: NixlConnector (the side channel is NIXL's)")
        return self


# ----------------------------------------------------------------------- expect
class ExpectBase(Strict):
    """One expect entry: a checker name, or ``{checker: {params}}``, optionally with ``allow_unknown: reason``."""

    kind: ClassVar[str]
    model: ClassVar[type[Params]]
    allow_unknown: str | None = Field(None, min_length=1, max_length=MAX_REASON, description=(
        "why an unknown verdict may pass here (printed beside it); without it an unknown verdict fails the run"))

    @property
    def checker(self) -> str:
        return self.kind

    @property
    def params(self) -> Params:
        """The parameters as the checker's own model (harness.checkers.params)."""
        return self.model.model_validate(getattr(self, self.kind).model_dump())


def _with_durations(name: str, model: type[Params]) -> type[Params]:
    """``model`` with its float (seconds) fields also accepting 500ms/2s, as a subclass."""
    fields: dict[str, Any] = {}
    for fname, info in model.model_fields.items():
        if info.annotation in (float, float | None):
            new = copy.copy(info)
            new.annotation = Duration if info.annotation is float else Duration | None
            fields[fname] = (new.annotation, new)
    if not fields:
        return model
    derived: type[Params] = create_model(model.__name__, __base__=model, __doc__=model.__doc__, **fields)
    return derived


def _expect_type(name: str, model: type[Params]) -> type[ExpectBase]:
    params = _with_durations(name, model)
    info = FieldInfo(annotation=params, default_factory=params, description=(model.__doc__ or "").strip())
    fields: dict[str, Any] = {name: (params, info)}
    wrapper: type[ExpectBase] = create_model(f"Expect_{name}", __base__=ExpectBase, **fields)
    wrapper.kind, wrapper.model = name, model
    return wrapper


EXPECT_TYPES: dict[str, type[ExpectBase]] = {n: _expect_type(n, m) for n, m in CHECKER_PARAMS.items()}


def _expect_entry(value: object) -> object:
    """``name`` and ``{name: null}`` mean the checker with default parameters (``allow_unknown`` beside it)."""
    if isinstance(value, str):
        return {value: {}}
    if isinstance(value, dict) and len(value) == 1 + ("allow_unknown" in value):
        key = next(k for k in value if k != "allow_unknown")
        return {**value, key: {} if value[key] is None else value[key]}
    return value


def _expect_kind(value: object) -> str | None:
    if isinstance(value, ExpectBase):
        return value.kind
    if isinstance(value, dict) and len(value) == 1 + ("allow_unknown" in value):
        return str(next(k for k in value if k != "allow_unknown"))
    return None


if TYPE_CHECKING:
    ExpectEntry = ExpectBase
else:  # a discriminated union over every checker in the registry, built at import
    ExpectEntry = Annotated[
        functools.reduce(operator.or_, (Annotated[t, Tag(n)] for n, t in EXPECT_TYPES.items())),
        Discriminator(_expect_kind, custom_error_type="unknown_checker",
                      custom_error_message="an expect entry is a checker name or {checker: params}"),
        BeforeValidator(_expect_entry),
    ]


# --------------------------------------------------------------------- scenario
class Scenario(Strict):
    """One scenario: what it proves, on which topology, the steps to run and what must hold afterwards."""

    name: ScenarioName = Field(description="lower-case words joined by '-'; the test id")
    about: str = Field(min_length=1, description="what the scenario proves, and what bug it catches")
    marks: list[MarkName] = Field(default_factory=list, max_length=MAX_STEPS,
                                  description="pytest marks, e.g. [slow]")
    target: TargetName = Field("reference", description="what is tested: a target name or module:attribute")
    catches: Catches = Field(
        description="the planted bugs it must catch: a list, or a mapping of each bug to the checkers one of "
                    "which must fire (docs/catches.md)")
    topology: Topology = Field(Topology.model_validate({}), description=Topology.__doc__)
    config: Config = Field(Config.model_validate({}), description=Config.__doc__)
    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="seed for generated workloads")
    steps: list[Step] = Field(min_length=1, max_length=MAX_STEPS, description=(
        "what happens, in order; each a one-key mapping (what a run of them may cost in all is bounded too: "
        "docs/limits.md)"))
    expect: list[ExpectEntry] = Field(min_length=1, max_length=MAX_STEPS,
                                      description="the checkers that judge the run, with parameters")

    def catch_names(self) -> list[str]:
        """The planted bugs of ``catches``, in file order (either form)."""
        return list(self.catches)

    def catch_checkers(self, bug: str) -> tuple[str, ...]:
        """The checkers one of which must be violated for ``bug`` to count as caught: those the mapping form
        names, else (the list form, or a bug it does not name) every expect checker but fault_fired."""
        if isinstance(self.catches, dict) and bug in self.catches:
            return tuple(self.catches[bug])
        return tuple(dict.fromkeys(e.checker for e in self.expect if e.checker != "fault_fired"))

    _source: str | None = PrivateAttr(None)  # the file it was loaded from
    _marks: Any = PrivateAttr(None)  # yamlnodes.Marks of that file: where each key path is
    _sha256: str | None = PrivateAttr(None)  # of that file's bytes as loaded (loader.digest), None from text

    def _locate(self, source: str, marks: Any) -> None:
        """Called by the loader: remember the file and its marks, for :meth:`where`."""
        self._source, self._marks = source, marks

    @property
    def source(self) -> str | None:
        """The file this scenario was loaded from (as the path was given), or None."""
        return self._source

    @property
    def sha256(self) -> str | None:
        """The sha256 (hex) of the bytes of the file this scenario was loaded from, or None (loaded from text):
        what a report records, and what ``lastcall replay`` finds the file by."""
        return self._sha256

    def where(self, *path: str | int) -> str:
        """``FILE:LINE:COL`` of a key path, e.g. ``sc.where("steps", 3)``, for reports that point into the file."""
        if self._marks is None:
            return self._source or "<scenario>"
        line, column = self._marks.locate(tuple(path))
        return f"{self._source}:{line}:{column}"


def _catch_forms(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The list form and the mapping form of ``catches`` in ``schema``, in that order."""
    prop = schema["properties"]["catches"]
    forms: list[dict[str, Any]] = prop.get("oneOf") or prop["anyOf"]
    return forms


@functools.cache
def _base_schema() -> dict[str, Any]:
    schema = Scenario.model_json_schema(by_alias=True)
    for form in _catch_forms(schema):  # the checkers a bug's mapping entry may name
        for value in form.get("patternProperties", {}).values():
            value["items"] = {"type": "string", "enum": [n for n in EXPECT_TYPES if n != "fault_fired"]}
    expect = schema["properties"]["expect"]
    names = list(EXPECT_TYPES)
    expect["items"] = {"anyOf": [
        {"type": "string", "enum": names, "description": "a checker with its default parameters"},
        expect["items"],
    ]}
    return schema


def json_schema(variants: list[str] | None = None) -> dict[str, Any]:
    """The JSON Schema of a scenario file (draft 2020-12), for editors.

    ``variants``: the names ``catches`` may use (harness.reference.variants.VARIANTS),
    offered for completion, with the handshake listener's planted bugs added
    (harness.reference.handshake_variants); left out, any string is accepted there.
    """
    schema = copy.deepcopy(_base_schema())
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
    if variants is not None:
        from harness.reference.handshake_variants import HANDSHAKE_VARIANTS

        handshake = [v for v in HANDSHAKE_VARIANTS if v != "reference" and v not in variants]
        names = {"type": "string", "enum": [*variants, *handshake]}
        forms = _catch_forms(schema)
        forms[0]["items"] = {"anyOf": [names, forms[0]["items"]]}  # a known name offered, module:attribute kept
        forms[1]["propertyNames"] = {"anyOf": [names, {"pattern": next(iter(forms[1]["patternProperties"]))}]}
    return schema
