"""Markdown for the pages lastcall generates (docs/steps.md, docs/cli.md): a table cell from free text."""

from __future__ import annotations

import re

__all__ = ["cell"]

_TAG = re.compile(r"<(?=[A-Za-z/!?])")  # what markdown would read as the start of an HTML tag


def cell(text: str | None) -> str:
    """``text`` on one line for a table cell: a | escaped, and a < outside code (``backend.<cmd>``) shown, not
    read as an HTML tag."""
    text = " ".join((text or "").replace("``", "`").split()).replace("|", "\\|")
    parts = text.split("`")
    return "`".join(_TAG.sub("&lt;", p) if i % 2 == 0 else p for i, p in enumerate(parts))
