"""A YAML workload for ``lastcall bench --workload``: read with the scenario loader's limits, every number bounded.

::

    ops: [kv_tensors_created, map32, unmap_pair]   # required
    arms: [reference]                              # optional, as are windows, requests, warmup
    windows: 9

:func:`read_workload` checks the file (regular, at most 1 MiB, UTF-8, the YAML
depth, value and alias limits of harness.scenario.yamlnodes), its keys, types and
bounds without importing the bench (``lastcall bench`` calls it first, so a
hostile file is refused at once); :func:`load_workload` also checks the op names.
"""

from __future__ import annotations

from typing import Any

from harness.errors import ConfigError

__all__ = ["WORKLOAD_KEYS", "WORKLOAD_BOUNDS", "MAX_WORKLOAD_NAMES", "read_workload", "load_workload"]

WORKLOAD_KEYS = ("ops", "arms", "windows", "requests", "warmup")  # what a YAML workload file may set
WORKLOAD_BOUNDS = {"windows": (1, 1000), "requests": (1, 100_000), "warmup": (0, 100)}  # lowest, highest
MAX_WORKLOAD_NAMES = 64  # the longest ops or arms list


def _workload_yaml(path: str) -> object:
    """The file's YAML through the scenario loader's reader and parser: the same size, depth and alias limits."""
    from harness.scenario.yamlnodes import ReadProblem, YamlProblem, parse, read_text

    try:
        return parse(read_text(path, expected="a mapping with a non-empty 'ops' list, e.g. ops: [map16]")).data
    except ReadProblem as exc:
        where = path if exc.position is None else f"{path}:{exc.position[0]}:{exc.position[1]}"
        raise ConfigError(f"{where}: cannot read the workload: {exc.message}") from None
    except YamlProblem as exc:
        line, column = exc.position
        raise ConfigError(f"{path}:{line}:{column}: cannot read the workload: {exc.problem.message}") from None


def read_workload(path: str) -> dict[str, Any]:
    """The workload at ``path`` with its keys, types and bounds checked, its op names not yet (no bench import).

    Error handling: ConfigError naming the file (and line, or key) and the limit or the mistake.
    """
    data = _workload_yaml(path)
    if not isinstance(data, dict) or not data.get("ops"):
        raise ConfigError(f"{path}: a workload is a mapping with a non-empty 'ops' list, e.g. ops: [map16]")
    unknown = sorted(str(k) for k in set(data) - set(WORKLOAD_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {unknown}; a workload may set {', '.join(WORKLOAD_KEYS)}")
    for key in ("ops", "arms"):
        if key in data and not (isinstance(data[key], list) and all(isinstance(x, str) for x in data[key])):
            raise ConfigError(f"{path}: {key}: expected a list of names, found {data[key]!r}")
        if len(data.get(key, ())) > MAX_WORKLOAD_NAMES:
            raise ConfigError(f"{path}: {key}: {len(data[key])} names, over lastcall's limit of "
                              f"{MAX_WORKLOAD_NAMES}; name each at most once")
    for key, (low, high) in WORKLOAD_BOUNDS.items():
        if key not in data:
            continue
        value = data[key]
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= low):
            raise ConfigError(f"{path}: {key}: expected a positive whole number, found {value!r}")
        if value > high:
            raise ConfigError(f"{path}: {key}: {value} is over lastcall's limit of {high}; write at most {high}")
    return data


def load_workload(path: str) -> dict[str, Any]:
    """A YAML workload: ``ops: [kv_tensors_created, map32, unmap_pair]`` and optionally arms, windows,
    requests, warmup. Errors name the file and the key (ConfigError); the file is read with the scenario
    loader's limits (harness.scenario.yamlnodes) and every number is bounded (:data:`WORKLOAD_BOUNDS`)."""
    data = read_workload(path)
    from harness.bench.arms import check_op  # the ops' names: this imports the bench's workload (and torch)

    for op in data["ops"]:
        check_op(op)
    return data
