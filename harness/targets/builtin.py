"""lastcall's own targets as attributes, for the ``lastcall.targets`` entry points of lastcall's distribution.

pyproject.toml registers every built-in name of :mod:`harness.targets.names` in the entry-point group
``lastcall.targets`` (harness.entrypoints), as a third-party distribution registers its own: the
reference and its planted-bug variants and the handshake variants as ``harness.targets.builtin:<name>``
(an attribute of this module, looked up when the entry point is loaded: importing this module imports no
target), the lazily imported targets (:data:`harness.targets.names.NAMED`) as their own
``module:attribute``.  ``lastcall targets`` lists the group; tests/test_target_entrypoints.py holds the
entry points equal to the static names, and each to the object :func:`harness.targets.load_target` loads.
"""

from __future__ import annotations

from typing import Any

from harness.targets import names

__all__: list[str] = []  # every other attribute is a target's name, made on access (PEP 562)


def __getattr__(name: str) -> Any:
    """The built-in target ``name``: a worker variant, or a handshake variant (imported now)."""
    if name in names.WORKER_VARIANTS:
        from harness.reference.variants import VARIANTS

        return VARIANTS[name]
    if name in names.HANDSHAKE_VARIANTS:
        from harness.reference.handshake_variants import handshake_target

        hs = handshake_target(name)
        if hs is not None:
            return hs
    raise AttributeError(f"module {__name__!r} has no target {name!r} (harness.targets.names lists them)")


def entry_point_values() -> dict[str, str]:
    """What each built-in name's ``lastcall.targets`` entry point must say (pyproject.toml), in names' order."""
    out = {n: f"harness.targets.builtin:{n}" for n in (*names.WORKER_VARIANTS, *names.HANDSHAKE_VARIANTS)}
    return {**out, **names.NAMED}


SECTION = '[project.entry-points."lastcall.targets"]'


def with_entry_points(pyproject: str) -> str:
    """``pyproject`` (pyproject.toml's text) with its ``lastcall.targets`` section written from
    :func:`entry_point_values`: the section's lines up to the next blank line are replaced, nothing else."""
    head, sep, rest = pyproject.partition(SECTION + "\n")
    if not sep:
        raise ValueError(f"pyproject.toml has no {SECTION} section")
    _, blank, tail = rest.partition("\n\n")
    lines = [f'{name} = "{value}"' for name, value in entry_point_values().items()]
    return head + sep + "\n".join(lines) + blank + tail


if __name__ == "__main__":  # python -m harness.targets.builtin: rewrite pyproject.toml's entry points
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "pyproject.toml"
    path.write_text(with_entry_points(path.read_text()))
    print(f"{path}: the lastcall.targets entry points written from harness.targets.names; now run "
          "pip install --no-deps -e .")
