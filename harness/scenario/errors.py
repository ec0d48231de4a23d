"""The scenario loader's error: located, with what was expected, what was found, and the fix.

``str(error)`` is one line ``FILE:LINE:COL: KEYPATH: MESSAGE``, and a second line
``  hint: ...`` when a fix is known::

    fixtures/bad-scenarios/unknown-step.yaml:7:5: steps[2]: unknown step 'relase'; expected one of: arm, ...
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import HarnessError

__all__ = ["ScenarioError", "Problem", "KeyPath", "format_path", "show"]

KeyPath = tuple[str | int, ...]  # a key path into the document: ("steps", 2, "send", "to")


def format_path(path: KeyPath) -> str:
    """``steps[2].send.to`` for ("steps", 2, "send", "to"); "" for the document itself."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def show(value: object) -> str:
    """A found value as the user wrote it: 'text', 3, true, null, a list, a mapping."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return repr(value) if len(value) <= 60 else repr(value[:57] + "...")
    if isinstance(value, (list, tuple)):
        return "an empty list" if not value else "a list"
    if isinstance(value, dict):
        return "an empty mapping" if not value else "a mapping"
    return type(value).__name__


@dataclass(frozen=True)
class Problem:
    """One mistake, before it is located in the file: where (a key path), what, and the fix."""

    path: KeyPath
    message: str  # the sentence after "KEYPATH: "
    hint: str | None = None
    expected: str | None = None
    found: str | None = None
    at: KeyPath | None = None  # point at this key (an unknown or duplicate key) rather than path's value


class ScenarioError(HarnessError, ValueError):
    """A scenario file that cannot be run: raised by the loader, before any process starts.

    ``line`` and ``column`` are 1-based (None when the file could not be read);
    ``path`` is the key path (``steps[2].send``), "" for the document itself;
    ``also`` holds the file's further errors, in file order.
    """

    def __init__(self, file: str, line: int | None, column: int | None, path: str, message: str, *,
                 expected: str | None = None, found: str | None = None, hint: str | None = None,
                 also: tuple[ScenarioError, ...] = ()) -> None:
        self.file, self.line, self.column, self.path = file, line, column, path
        self.message, self.expected, self.found, self.hint = message, expected, found, hint
        self.also = also
        super().__init__(str(self))

    @property
    def errors(self) -> tuple[ScenarioError, ...]:
        """This error and every further one in the same file."""
        return (self, *self.also)

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}:{self.column}"
        text = ": ".join(p for p in (where, self.path, self.message) if p)
        return f"{text}\n  hint: {self.hint}" if self.hint else text
