"""docs/steps.md, generated from the step registry: every step kind and client fault, its fields and an example.

``python -m harness.scenario.stepdocs > docs/steps.md``; a test checks the committed page is current and loads
every example through the loader (:func:`example_scenario`).  What each part comes from:

* the step kinds, their category and the run they drive: the player's registry (``@step_kind``,
  harness.scenario.player.STEP_KINDS, complete once harness.scenario.runner is imported);
* their fields with type, default, bounds and description: the pydantic models of harness.scenario.steps;
* each example: the step's ``example`` (harness.scenario.steps), each fault's ``FAULT_EXAMPLES``
  (harness.scenario.client_spec), what each fault does: its function's docstring in harness.faults.client;
* which targets can play a step: the capability it needs (its class's ``needs``, harness.scenario.needs.STEP_NEEDS,
  the map by which a scenario is skipped on a target that lacks one) and each built-in target's ``capabilities``.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import yaml
from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo

from harness.categories import CATEGORIES
from harness.faults import client as cf
from harness.launch.parts import CASTS
from harness.markdown import cell
from harness.reference.capabilities import TARGET_SITES
from harness.scenario import fields
from harness.scenario.client_spec import (
    FAULT_EXAMPLES,
    FRAMELESS_FAULTS,
    NO_REPLY_WAIT,
    READER_FAULTS,
    SEND_FAULTS,
    WITHHOLDING_FAULTS,
    Pipelined,
)
from harness.scenario.needs import ARM_LISTENER_SITE, STEP_NEEDS
from harness.scenario.runner import STEP_KINDS
from harness.scenario.steps import ENGINE_STEPS, EVENT_KINDS, HANDSHAKE_STEPS, STEP_TYPES, StepBase
from harness.targets import capabilities_of, load_target
from harness.targets.api import CAPABILITIES
from harness.targets.names import ENGINE_VARIANTS, NAMED

__all__ = ["render_markdown", "example_scenario", "TARGETS"]

# the built-in targets a user picks (their planted-bug variants share their capabilities)
TARGETS: tuple[str, ...] = ("reference", *(n for n in NAMED if n not in ENGINE_VARIANTS[1:]))
# value types named by their schema (harness.scenario.fields), each with what it accepts
_NAMED: tuple[tuple[str, Any, str], ...] = (
    ("duration", fields.Duration, f"Seconds, or a number with a unit (ns, us, ms, s, m, min, h): `500ms`, `2s`; "
                                  f"at most {fields.MAX_SECONDS:g} s"),
    ("size", fields.Size, f"Bytes, or a number with a unit (B, K or KB, KiB, M, MiB, G, GiB ...): `2MiB`; at most "
                          f"{fields.MAX_SIZE} bytes (1 GiB)"),
    ("step name", fields.StepName, f"Letters, digits and `_`, not starting with a digit; at most {fields.MAX_NAME} "
                                   "characters: the `as:` name of a step"),
    ("site", fields.SiteName, "A failpoint site, dotted lower-case words: `backend.map_to_kv_tensors`, "
                              "`listener.frame_read`"),
    ("instance name", fields.IpcName, f"An instance's directory under the run's root: 1 to "
                                      f"{fields.MAX_IPC} letters, digits, `_`, `.` or `-`, not only dots"),
)
_DROP = ("title", "description", "default", "ge", "gt", "le", "lt")  # keys a field adds to its type's schema
_BOUNDS = (("minimum", ">= {}"), ("ge", ">= {}"), ("exclusiveMinimum", "> {}"), ("gt", "> {}"),
           ("maximum", "<= {}"), ("le", "<= {}"), ("exclusiveMaximum", "< {}"), ("lt", "< {}"),
           ("minLength", "at least {} characters"), ("maxLength", "at most {} characters"),
           ("minItems", "at least {} items"), ("maxItems", "at most {} items"))
_LONG_ENUM = 12  # an enum longer than this is named by its count, not listed in a table cell


def _core(node: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in node.items() if k not in _DROP}


_CORES = [(name, _core(TypeAdapter(t).json_schema())) for name, t, _ in _NAMED]
_OWN = {name: FieldInfo.from_annotation(t).metadata for name, t, _ in _NAMED}  # a named type's own constraints


def _named(node: dict[str, Any]) -> str | None:
    core = _core(node)
    return next((name for name, c in _CORES if c == core), None)


def _branches(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in node.get("anyOf", node.get("oneOf", [])) if b.get("type") != "null"]


def _type(node: dict[str, Any]) -> str:
    """A field's type in words, from its JSON Schema (what ``lastcall schema`` prints)."""
    named = _named(node)
    if named is not None:
        return f"[{named}](#{named.replace(' ', '-')})"
    if "$ref" in node:
        model = node["$ref"].rsplit("/", 1)[1]
        return f"[{model}](#{model.lower()})"
    if "anyOf" in node or "oneOf" in node:
        return " or ".join(dict.fromkeys(_type(b) for b in _branches(node)))
    if "const" in node:
        return f"`{node['const']}`"
    if "enum" in node:
        values = node["enum"]
        if tuple(values) == EVENT_KINDS:
            return "[event kind](events.md)"
        return f"one of {len(values)} names" if len(values) > _LONG_ENUM else \
            "one of " + ", ".join(f"`{v}`" for v in values)
    if node.get("type") == "array":
        return f"list of {_type(node['items'])}"
    return {"integer": "int", "number": "number", "string": "string", "boolean": "bool"}.get(node.get("type", ""),
                                                                                           "any")


def _unit(named: str | None, value: Any) -> str:
    return f"{value:g} s" if named == "duration" else f"{value} bytes" if named == "size" else f"{value}"


def _unit_of(node: dict[str, Any]) -> str | None:
    """The named type a field's value is (duration, size ...), itself or as the one branch that is not null."""
    return _named(node) or next((n for b in _branches(node) if (n := _named(b)) is not None), None)


def _schema_bounds(node: dict[str, Any]) -> list[str]:
    """The bounds of the types a field is made of, from their JSON Schema (a named type's own are its section's)."""
    if _named(node) is not None:
        return []
    out = [fmt.format(node[key]) for key, fmt in _BOUNDS if key in node]
    for branch in _branches(node):
        out += _schema_bounds(branch)
    if "items" in node:
        out += [f"each {b}" for b in _schema_bounds(node["items"])]
    return out


_METADATA = (("ge", ">= {}"), ("gt", "> {}"), ("le", "<= {}"), ("lt", "< {}"), ("min_length", "at least {} items"),
             ("max_length", "at most {} items"))


def _bounds(info: FieldInfo | None, node: dict[str, Any]) -> str:
    """A field's bounds: its Field constraints (pydantic's metadata: the JSON Schema of a duration or a size loses
    some), then those of the types it is made of."""
    unit = _unit_of(node)
    strings = unit is None and (node.get("type") == "string" or any(b.get("type") == "string"
                                                                    for b in _branches(node)))
    out = []
    for item in info.metadata if info is not None else ():
        if unit is not None and item in _OWN[unit]:
            continue
        for attr, fmt in _METADATA:
            value = getattr(item, attr, None)
            if value is not None:
                text = fmt.format(_unit(unit, value))
                out.append(text.replace("items", "characters") if strings else text)
    return cell(", ".join(dict.fromkeys([*out, *_schema_bounds(node)]))) or "-"


def _flow(value: Any) -> str:
    """A value as YAML's flow style writes it: ``{rank: 0, pp: 0}``, ``[a, b]``, ``true``."""
    if isinstance(value, BaseModel):
        value = value.model_dump(by_alias=True)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _default(info: FieldInfo, node: dict[str, Any]) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if value is None:
        return "-"
    named = _named(node)
    return f"`{_unit(named, value).replace(' ', '') if named == 'duration' else _flow(value)}`"


def _field_rows(model: type[BaseModel]) -> list[str]:
    schema = model.model_json_schema(by_alias=True)
    rows = ["| field | type | default | bounds | description |", "|---|---|---|---|---|"]
    for name, info in model.model_fields.items():
        key = info.alias or name
        node = schema["properties"][key]
        rows.append(f"| `{key}` | {cell(_type(node))} | {_default(info, node)} | "
                    f"{_bounds(info, node)} | {cell(info.description)} |")
    return rows


# ------------------------------------------------------------------ examples
def _kinds_of(steps_yaml: str) -> list[str]:
    return [next(iter(step)) for step in yaml.safe_load(steps_yaml)]


def example_scenario(steps_yaml: str, name: str) -> str:
    """A whole scenario around an example's list of steps, for the loader: the target and planted bug of the
    run its steps drive (the stand-in engine, a handshake listener, the worker listener)."""
    kinds = _kinds_of(steps_yaml)
    if any(k in ENGINE_STEPS for k in kinds) or "- start: engine" in steps_yaml:
        head, expect = f"target: {ENGINE_VARIANTS[0]}\ncatches: [{ENGINE_VARIANTS[1]}]\n", "engine_tree_exits"
    elif any(k in HANDSHAKE_STEPS for k in kinds):
        head, expect = "catches: [never_stopped]\n", "port_released"
    else:
        head, expect = "catches: [no_conn_tracking]\n", "no_orphan_processes"
    body = "".join(f"  {line}\n" for line in steps_yaml.splitlines())
    return (f"name: example-{name.replace('_', '-')}\nabout: the example of {name} in docs/steps.md\n{head}"
            f"steps:\n{body}expect:\n  - {expect}\n")


def _example(steps_yaml: str) -> list[str]:
    return ["```yaml", "steps:", *(f"  {line}" for line in steps_yaml.splitlines()), "```", ""]


# ------------------------------------------------------------------ the page
def _targets_with(capability: str) -> list[str]:
    return [n for n in TARGETS if capability in capabilities_of(load_target(n))]


def _needs(kind: str) -> str:
    need = STEP_NEEDS.get(kind)
    if need is None:
        return "no capability of its own: any target that has the parts of the run it drives"
    return f"[`{need}`](#capabilities): {', '.join(f'`{t}`' for t in _targets_with(need)) or 'no built-in target'}"


def _run(kind: str) -> str:
    cast = STEP_KINDS[kind].cast
    return "any run" if cast is None else f"`{cast}`: {CASTS[cast].about}"


def _step(cls: type[StepBase]) -> list[str]:
    kind = cls.kind
    value = cls.model_fields[kind]
    out = [f"### `{kind}`", "", cell(value.description), "",
           f"- category: `{STEP_KINDS[kind].category}` ({CATEGORIES[STEP_KINDS[kind].category]})",
           f"- run: {_run(kind)}", f"- needs: {_needs(kind)}"]
    if kind == "arm":
        need = STEP_NEEDS[ARM_LISTENER_SITE]
        out.append(f"- an arm on a site outside {', '.join(f'`{s}*`' for s in TARGET_SITES)} also needs `{need}`: "
                   + ", ".join(f"`{t}`" for t in _targets_with(need)))
    if kind == "hold_port":  # harness.scenario.needs.step_needs: an engine run holds the port for the engine
        out.append("- in an engine run (a scenario with an engine step) it needs nothing: it holds a port for the "
                   "engine (`config.side_channel_port`)")
    out.append("")
    model = value.annotation
    if isinstance(model, type) and issubclass(model, BaseModel):
        out += _field_rows(model)
    else:
        node = cls.model_json_schema(by_alias=True)["properties"][kind]
        out += ["The value is not a mapping:", "", "| value | type | bounds |", "|---|---|---|",
                f"| `{kind}: ...` | {cell(_type(node))} | {_bounds(None, node)} |"]
    return [*out, "", *_example(cls.example)]


def _fault(name: str) -> list[str]:
    about = "No fault: a plain request, its reply read (the default)" if name == "none" else \
        (inspect.getdoc(getattr(cf, name)) or "").split("\n\n")[0]
    notes = [text for group, text in (
        (WITHHOLDING_FAULTS, "withholds the rest of its frame: `finish: NAME` sends it"),
        (FRAMELESS_FAULTS, "sends a malformed frame of its own: no `cmd`; `hang_up: true` allowed"),
        (NO_REPLY_WAIT, "waits for no reply: no `timeout`; `wait: {closed: NAME}` watches the connection"),
        (READER_FAULTS, "a whole request sent; its reply read slowly or never (`reply_size` pads it)"),
    ) if name in group]
    return [f"### `fault: {name}`", "", cell(about) + ("." if not about.endswith(".") else ""), "",
            *(f"- {n}" for n in notes), *([""] if notes else []), *_example(FAULT_EXAMPLES[name])]


def _by_category() -> Iterator[tuple[str, list[type[StepBase]]]]:
    for category in CATEGORIES:
        kinds = [STEP_TYPES[k] for k in sorted(STEP_TYPES) if STEP_KINDS[k].category == category]
        if kinds:
            yield category, kinds


def _value_types() -> list[str]:
    out = ["## Value types", ""]
    for name, _t, about in _NAMED:
        out += [f"### {name}", "", about + ".", ""]
    for model in (fields.Worker, Pipelined):  # the models a step's field is made of
        out += [f"### {model.__name__}", "", cell(model.__doc__), "", *_field_rows(model), ""]
    return out


def render_markdown() -> str:
    """docs/steps.md: the targets' capabilities, an index, every step kind by category, the client faults."""
    out = ["# Steps", "",
           "<!-- generated by `python -m harness.scenario.stepdocs > docs/steps.md`; a test checks it is current -->",
           "",
           "A scenario's `steps:` is a list of one-key mappings, `- KIND: VALUE`, played in order "
           "([scenarios.md](scenarios.md)).",
           "Each step below gives its fields (`as:` names it, for a later `wait`, `release`, `finish` or expect "
           "entry), its category",
           "(what the checkers select on), the run it drives, the capability a target needs to play it (a scenario "
           "whose steps need",
           "one its target lacks is skipped, naming it) and an example, which loads as written in a scenario.  "
           "`lastcall schema`",
           "prints the same fields as JSON Schema; bounds here are the loader's.", "",
           "## Capabilities", "",
           "What a target says it can do (its `capabilities`), and the built-in targets that can; each planted-bug "
           "variant has",
           "its target's (`lastcall targets` lists them all).", "",
           "| capability | what the target has | built-in targets with it |", "|---|---|---|",
           *(f"| `{c}` | {cell(about)} | {', '.join(f'`{t}`' for t in _targets_with(c)) or '-'} |"
             for c, about in CAPABILITIES.items()), "",
           "## Index", "", "| step | category | run | needs |", "|---|---|---|---|",
           *(f"| [`{k}`](#{k}) | {STEP_KINDS[k].category} | {STEP_KINDS[k].cast or 'any'} | "
             f"{STEP_NEEDS.get(k, '-')} |" for k in sorted(STEP_TYPES)), ""]
    for category, classes in _by_category():
        out += [f"## Category: {category}", "", CATEGORIES[category][0].upper() + CATEGORIES[category][1:] + ".", ""]
        for cls in classes:
            out += _step(cls)
    out += ["## Client faults", "",
            "The `fault:` of a `send` step: the harness as a misbehaving client on the worker's socket, in the "
            "target's own framing", "(it needs `wire`, as `send` does).", ""]
    for name in SEND_FAULTS:
        out += _fault(name)
    out += _value_types()
    return "\n".join(out).rstrip("\n") + "\n"


if __name__ == "__main__":  # python -m harness.scenario.stepdocs > docs/steps.md
    print(render_markdown(), end="")
