"""TCP and Unix sockets from /proc/net, attributed to pids, and trial binds of ports.

/proc/net/tcp{,6} and /proc/net/unix list every socket of this network
namespace with its inode; a pid holds a socket when one of its
``/proc/PID/fd/N`` links reads ``socket:[INODE]``.  TIME_WAIT entries have
inode 0: no process holds them (the kernel does), so they carry no pid.

TCP states are the kernel's hex codes (include/net/tcp_states.h); addresses are
printed as little-endian 32-bit words in hex, ports as big-endian hex.  A Unix
socket is ``LISTEN`` when its flags carry __SO_ACCEPTCON (0x10000), else its
socket state (SS_UNCONNECTED ...).

SO_REUSEADDR and the trial bind.  libzmq's TCP listener sets SO_REUSEADDR on
every POSIX system (tcp_listener.cpp; checked here on libzmq 4.3.5: a bound
ROUTER's listening fd reads SO_REUSEADDR = 1), so a ZMQ server's "own options"
include it.  What Linux does with a port left in TIME_WAIT (checked on 6.x):

* the closed server socket had SO_REUSEADDR (as libzmq's): a new bind *with*
  SO_REUSEADDR succeeds; one without fails with EADDRINUSE;
* it did not: every new bind fails, with or without SO_REUSEADDR, until the
  TIME_WAIT expires (the kernel requires SO_REUSEADDR on both sockets);
* a LISTENing socket blocks every bind, with or without SO_REUSEADDR.

So :func:`trial_bind` ``reuseaddr=True`` answers "can a ZMQ server rebind
now?"; ``reuseaddr=False`` (CPython's test.support.bind_port discipline) also
fails on TIME_WAIT.  The snapshot binds with the server's options and records
which, and reports TIME_WAIT entries, so ``port_released`` can tell a port still
LISTENing (by which pid) from one only in TIME_WAIT.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Iterable

from harness.probes.model import BindResult, SocketEntry

__all__ = ["TCP_STATES", "UNIX_STATES", "decode_addr", "parse_tcp", "parse_unix", "inode_owners", "sockets",
           "trial_bind"]

TCP_STATES = {
    "01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
    "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING",
    "0C": "NEW_SYN_RECV",
}
UNIX_STATES = {"00": "FREE", "01": "UNCONNECTED", "02": "CONNECTING", "03": "CONNECTED", "04": "DISCONNECTING"}
SO_ACCEPTCON = 0x10000  # __SO_ACCEPTCON in /proc/net/unix's Flags: a listening socket


def _note(errors: list[str] | None, what: str, exc: OSError) -> None:
    if errors is not None:
        errors.append(f"{what}: {exc.strerror or exc}")


def decode_addr(hexaddr: str) -> tuple[str, int]:
    """``0100007F:1F90`` -> ("127.0.0.1", 8080); a 32-digit address decodes as IPv6."""
    host, _, port = hexaddr.partition(":")
    raw = bytes.fromhex(host)
    # the kernel prints each 32-bit word of the address in host (little-endian) order
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    family = socket.AF_INET6 if len(words) == 16 else socket.AF_INET
    return socket.inet_ntop(family, words), int(port, 16)


def _read(path: str, errors: list[str] | None) -> list[str]:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace").splitlines()[1:]
    except FileNotFoundError:
        return []  # no IPv6 in this kernel, for instance
    except OSError as exc:
        _note(errors, f"read {path}", exc)
        return []


def parse_tcp(proto: str = "tcp", errors: list[str] | None = None) -> list[SocketEntry]:
    """Every socket of /proc/net/``proto`` (``tcp`` or ``tcp6``), without pids."""
    out: list[SocketEntry] = []
    for line in _read(f"/proc/net/{proto}", errors):
        f = line.split()
        if len(f) < 10:
            continue
        try:
            host, port = decode_addr(f[1])
            inode = int(f[9])
        except (ValueError, OSError):
            if errors is not None:
                errors.append(f"parse /proc/net/{proto}: {line.strip()[:200]}")
            continue
        local = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        out.append(SocketEntry(proto, TCP_STATES.get(f[3].upper(), f[3]), local, port, inode))
    return out


def parse_unix(errors: list[str] | None = None) -> list[SocketEntry]:
    """Every socket of /proc/net/unix, without pids; ``local`` is its path ("" when unnamed, "@..." abstract)."""
    out: list[SocketEntry] = []
    for line in _read("/proc/net/unix", errors):
        f = line.split(None, 7)
        if len(f) < 7:
            continue
        try:
            flags, inode = int(f[3], 16), int(f[6])
        except ValueError:
            if errors is not None:
                errors.append(f"parse /proc/net/unix: {line.strip()[:200]}")
            continue
        state = "LISTEN" if flags & SO_ACCEPTCON else UNIX_STATES.get(f[5], f[5])
        out.append(SocketEntry("unix", state, f[7] if len(f) > 7 else "", 0, inode))
    return out


def inode_owners(pids: Iterable[int] | None = None, errors: list[str] | None = None,
                 inodes: set[int] | None = None) -> dict[int, tuple[int, ...]]:
    """Socket inode -> the pids holding it, from /proc/PID/fd links.

    ``pids``: scan only these (fast); None scans every process, silently
    skipping those we may not read (other users').  ``inodes``: keep only these.
    """
    if pids is None:
        try:
            scan = [int(n) for n in os.listdir("/proc") if n.isdigit()]
        except OSError as exc:
            _note(errors, "list /proc", exc)
            return {}
        quiet = True
    else:
        scan, quiet = sorted(set(pids)), False
    held: dict[int, set[int]] = {}
    for pid in scan:
        base = f"/proc/{pid}/fd"
        try:
            names = os.listdir(base)
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited: normal
        except OSError as exc:
            if not quiet:
                _note(errors, f"list {base}", exc)
            continue
        for name in names:
            try:
                target = os.readlink(f"{base}/{name}")
            except OSError:
                continue  # closed while we read, or the process exited
            if target.startswith("socket:["):
                inode = int(target[8:-1])
                if inodes is None or inode in inodes:
                    held.setdefault(inode, set()).add(pid)
    return {inode: tuple(sorted(p)) for inode, p in held.items()}


def _under(path: str, root: str) -> bool:
    top = root.rstrip("/")
    return path == top or path.startswith(top + "/")


def sockets(pids: Iterable[int] | None = None, ports: Iterable[int] | None = None, unix_under: str | None = None,
            errors: list[str] | None = None, *, owners: dict[int, tuple[int, ...]] | None = None
            ) -> tuple[SocketEntry, ...]:
    """TCP (v4, v6) and Unix sockets, with the pids holding them, sorted.

    Selected (when any selector is given; otherwise every socket): TCP sockets
    whose local port is in ``ports`` (any state: LISTEN, TIME_WAIT ...); Unix
    sockets whose path is ``unix_under`` or below it; and sockets held by one of
    ``pids``: every TCP one, and the Unix ones that listen or have a path
    (unnamed connected pairs show among the fds instead).

    ``owners``: inode -> pids already known (from the processes' fds), to save
    a scan.  A selected socket held by none of ``pids`` is looked up over every
    process, so a listener leaked by a process outside the selection still gets
    its pid.
    """
    pid_list = None if pids is None else sorted(set(pids))
    port_set = set(ports or ())
    select_all = pid_list is None and not port_set and unix_under is None
    if owners is None:
        owners = inode_owners(pid_list, errors) if pid_list is not None or select_all else {}
    unix = parse_unix(errors)
    # /proc/net/tcp{,6} cost milliseconds each, however few sockets they list (the kernel walks its whole
    # connection table): read only when they can hold a selected socket, a port asked for or an inode a pid
    # holds that is no Unix socket (one closed since its fd was read counts as maybe TCP: read them)
    unix_inodes = {e.inode for e in unix}
    need_tcp = select_all or bool(port_set) or (pid_list is not None and any(i not in unix_inodes for i in owners))
    tcp = parse_tcp("tcp", errors) + parse_tcp("tcp6", errors) if need_tcp else []
    entries = tcp + unix
    chosen: list[SocketEntry] = []
    for e in entries:
        held = pid_list is not None and e.inode in owners
        if e.proto == "unix":
            keep = (unix_under is not None and bool(e.local) and _under(e.local, unix_under)) or \
                (held and (e.state == "LISTEN" or bool(e.local)))
        else:
            keep = e.port in port_set or held
        if select_all or keep:
            chosen.append(e)
    missing = {e.inode for e in chosen if e.inode and e.inode not in owners}
    if missing:
        owners = {**owners, **inode_owners(None, errors, missing)}
    out = [SocketEntry(e.proto, e.state, e.local, e.port, e.inode, owners.get(e.inode, ())) for e in chosen]
    return tuple(sorted(out, key=lambda e: (e.proto, e.local, e.state, e.inode)))


def _error(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno, "") if exc.errno is not None else ""
    return f"{name}: {exc.strerror}" if name else str(exc)


def trial_bind(host: str, port: int, reuseaddr: bool = False) -> BindResult:
    """Bind (and listen on) a fresh TCP socket at (host, port), then close it at once.

    ``reuseaddr``: set SO_REUSEADDR first, as the server under test does (libzmq:
    yes, on POSIX; see the module docs for what Linux allows either way).
    Returns: ok, or the error ("EADDRINUSE: Address already in use"); never raises.
    Resource handling: a listening socket closed with no connection leaves no TIME_WAIT.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        s = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        return BindResult(host, port, False, _error(exc), reuseaddr)
    try:
        if reuseaddr:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        s.listen(1)
        return BindResult(host, port, True, "", reuseaddr)
    except OSError as exc:  # socket.gaierror for a bad host is an OSError too
        return BindResult(host, port, False, _error(exc), reuseaddr)
    finally:
        s.close()
