"""What a listener removes of its own on disk: files it made, and the directories of the path rule once empty."""

from __future__ import annotations

import errno
import re
from pathlib import Path

from harness.reference.paths import DIR_PREFIX

__all__ = ["remove_empty_dirs", "unlink_quietly"]

_PP_DIR = re.compile(r"pp[0-9]+")  # a pipeline-stage subdirectory of the path rule


def remove_empty_dirs(sock: Path) -> None:
    """rmdir the socket's ``pp<N>`` directory, then the instance directory, while empty.

    Only directories of the path rule are touched (never a parent we did not
    create).  Another rank's socket left in one (ENOTEMPTY) or its concurrent
    removal (ENOENT) is normal.
    """
    d = sock.parent
    while d.name.startswith(DIR_PREFIX) or _PP_DIR.fullmatch(d.name):
        try:
            d.rmdir()
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.ENOENT, errno.EEXIST):
                raise
            if exc.errno != errno.ENOENT:
                return
        d = d.parent


def unlink_quietly(*paths: Path) -> None:
    """Unlink each of ``paths``; one already gone is fine."""
    for p in paths:
        try:
            p.unlink()
        except FileNotFoundError:
            pass
