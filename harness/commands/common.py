"""What the commands share: their exit codes, argument types, name picking and plain tables."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Callable, Iterable, Sequence

from harness.errors import ConfigError

__all__ = ["EXIT_OK", "EXIT_BROKEN", "EXIT_USAGE", "EXIT_INTERNAL", "EXIT_INTERRUPTED", "REFERENCE", "DETAIL_MIN",
           "REPEAT_MAX", "arg_type", "int_at_least", "pick", "unique", "table"]

EXIT_OK = 0  # the command did what was asked
EXIT_BROKEN = 1  # contract: a check failed its expectation
EXIT_USAGE = 2  # bad invocation or input; the message says what to change
EXIT_INTERNAL = 3  # a bug in lastcall; the traceback is in a temp file
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
REFERENCE = "reference"  # the variant that must keep every check
DETAIL_MIN = 30  # columns of detail shown however narrow the terminal
REPEAT_MAX = 1000  # lastcall run --repeat: more is a typo, not a flakiness hunt


def arg_type(fn: Callable[[str], object], name: str) -> Callable[[str], object]:
    def convert(text: str) -> object:
        try:
            return fn(text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = name
    return convert


def int_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not an integer, e.g. {low}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} must be >= {low}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"{value} is over lastcall's limit of {high}; give at most {high}")
        return value

    return convert


def pick(kind: str, name: str, known: Sequence[str]) -> str:
    """``name`` if known, else ConfigError with the nearest known name and the full list."""
    if name in known:
        return name
    near = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    raise ConfigError(f"unknown {kind} {name!r}{hint} (known: {', '.join(known)})")


def unique(names: Iterable[str]) -> list[str]:
    """``names`` in their order, each once."""
    return list(dict.fromkeys(names))


def table(rows: list[tuple[str, ...]]) -> None:
    """Print ``rows`` (the first a header) as columns two spaces apart."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
