"""Names of what a run creates: short, unique under pytest-xdist, and attributable to their process.

Every path a run or a test root creates under /tmp starts with ``lc-<pid>x``, every
ipc name with ``r<pid>x``: the leak guard of the pytest plugin attributes a
leftover to the process (xdist worker) and the test that made it, and never to a
neighbour running in parallel.  The rest is a short hash of (test node id,
repeat index, a counter), so repeated and parallel runs never collide.  Names
stay short enough for the 107-byte socket path limit.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import tempfile
from pathlib import Path

__all__ = ["process_tag", "new_run_id", "temp_root", "TMP"]

TMP = "/tmp"  # short on purpose: socket paths must fit sun_path
_counter = itertools.count()


def process_tag() -> str:
    """``<pid>x``: the prefix of everything this process names."""
    return f"{os.getpid()}x"


def new_run_id(node_id: str = "", repeat: int = 0) -> str:
    """``<pid>x<hash6>`` for one run of ``node_id``."""
    digest = hashlib.blake2s(f"{node_id}#{repeat}#{next(_counter)}".encode(), digest_size=3).hexdigest()
    return f"{process_tag()}{digest}"


def temp_root() -> Path:
    """A fresh, private, short directory ``/tmp/lc-<pid>x<random>``; the caller removes it."""
    return Path(tempfile.mkdtemp(prefix=f"lc-{process_tag()}", dir=TMP))
