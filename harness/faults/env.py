"""Environment faults: the socket path removed or replaced while live; a dead predecessor's leftovers."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

__all__ = ["remove_socket", "remove_socket_dir", "replace_socket", "leave_stale_socket"]

# The predecessor: binds the socket, writes its owner record (harness.reference.paths.OwnerRecord's fields, its
# own pid and start time) and is SIGKILLed, as a worker killed mid-run leaves them.  Plain stdlib: starts fast.
_PREDECESSOR = r"""
import json, os, signal, socket, sys
path, owner, ipc, rank, pp = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
s.listen()
stat = open("/proc/self/stat", "rb").read()
ticks = int(stat[stat.rindex(b")") + 2:].split()[19])
with open(owner, "w") as f:
    json.dump({"pid": os.getpid(), "start_ticks": ticks, "ipc": ipc, "kind": "socket", "rank": rank, "pp": pp}, f)
os.kill(os.getpid(), signal.SIGKILL)
"""
PREDECESSOR_TIMEOUT = 30.0  # seconds the predecessor may take to start, bind and die (a safety net)


def remove_socket(path: str) -> None:
    """Unlink the socket file (and its owner record) while the listener is live, as kvctl delete does."""
    os.unlink(path)
    try:
        os.unlink(Path(path).with_suffix(".owner"))
    except FileNotFoundError:
        pass


def remove_socket_dir(path: str) -> None:
    """Remove the socket's whole directory while the listener is live."""
    shutil.rmtree(Path(path).parent)


def replace_socket(path: str) -> socket.socket:
    """Put another bound socket at the path (a different inode); the caller closes and removes it."""
    os.unlink(path)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    return s


def leave_stale_socket(path: str, ipc: str, rank: int = 0, pp: int = 0) -> int:
    """Leave at ``path`` the socket file and owner record of a process SIGKILLed while it listened there.

    Returns: the dead predecessor's pid.  Error handling: RuntimeError if it did not die by SIGKILL with both
        files in place.
    """
    owner = str(Path(path).with_suffix(".owner"))
    proc = subprocess.run([sys.executable, "-S", "-c", _PREDECESSOR, path, owner, ipc, str(rank), str(pp)],
                          capture_output=True, timeout=PREDECESSOR_TIMEOUT, check=False)
    if proc.returncode != -signal.SIGKILL or not (os.path.exists(path) and os.path.exists(owner)):
        raise RuntimeError(f"the predecessor at {path} exited {proc.returncode}, not by SIGKILL with its socket and "
                           f"owner record in place: {proc.stderr.decode(errors='replace').strip()[-300:]}")
    with open(owner) as f:
        return int(json.load(f)["pid"])
