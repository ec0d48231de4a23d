"""Environment faults: the socket path removed or replaced while live."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

__all__ = ["remove_socket", "remove_socket_dir", "replace_socket"]


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
