"""``lastcall serve`` (one reference worker in the foreground) and ``lastcall ctl`` (the instances left behind)."""

from __future__ import annotations

import argparse
from typing import Any

from harness.commands.common import EXIT_OK, arg_type, int_at_least, table
from harness.errors import ConfigError
from harness.units import parse_duration, parse_size

__all__ = ["register"]


def register(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    """Add ``serve`` and ``ctl`` to lastcall's subcommands."""
    p = sub.add_parser("serve", help="run one reference worker until SIGTERM/SIGINT", formatter_class=fmt,
                       description="Serve one reference worker in the foreground. The socket path is the first "
                                   "line on stdout; SIGTERM or SIGINT shuts it down (a drain that times out is "
                                   "retried) and the process exits 0 with nothing left behind.",
                       epilog="exit codes: 0 shut down cleanly, 2 bad flag or socket in use, 3 internal error")
    p.add_argument("--ipc", required=True, metavar="NAME", help="instance name (names the socket directory)")
    p.add_argument("--rank", type=int_at_least(0, 63), default=0, help="tensor-parallel rank (default 0)")
    p.add_argument("--pp", type=int_at_least(0, 63), default=0, help="pipeline stage (default 0)")
    p.add_argument("--tp", type=int_at_least(1, 64), default=1, help="tensor-parallel size; rank < tp (default 1)")
    p.add_argument("--root", metavar="DIR", help="socket root (default $LASTCALL_ROOT or the temp dir)")
    p.add_argument("--capacity", type=arg_type(parse_size, "size"), default=1 << 30, metavar="SIZE",
                   help="KV address space of group 0, e.g. 512MiB (default 1GiB)")
    p.add_argument("--drain-timeout", type=arg_type(parse_duration, "duration"), default=5.0,
                   metavar="SECONDS", help="how long stop waits for a handler, e.g. 500ms (default 5s)")
    p.set_defaults(func=_cmd_serve)

    ctl = sub.add_parser("ctl", help="list, delete or sweep leftover instances",
                         description="Instances are socket directories under the root and usage segments "
                                     "in the shm dir; owner records say whether their process is alive.")
    ctl_sub = ctl.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, func, about in (("list", _cmd_ctl_list, "one line per socket or segment, with its owner"),
                              ("delete", _cmd_ctl_delete, "remove one instance's sockets, records and segment"),
                              ("sweep", _cmd_ctl_sweep, "remove every instance whose owners are all dead")):
        q = ctl_sub.add_parser(name, help=about, description=about)
        if name == "delete":
            q.add_argument("ipc", metavar="IPC", help="the instance's ipc name (or the key list shows)")
            q.add_argument("--force", action="store_true", help="delete even while an owner is alive")
        q.add_argument("--root", metavar="DIR", help="socket root (default $LASTCALL_ROOT or the temp dir)")
        q.add_argument("--shm-dir", default="/dev/shm", metavar="DIR", help="where usage segments live")
        q.set_defaults(func=func)


def _cmd_serve(args: argparse.Namespace) -> int:
    from harness.reference.paths import socket_path

    if args.rank >= args.tp:
        raise ConfigError(f"--rank {args.rank} must be smaller than --tp {args.tp}")
    socket_path(args.ipc, args.rank, args.pp, args.root)  # refuse a too-long path before importing torch
    from harness.reference.listener import ListenerConfig
    from harness.reference.serve import serve
    from harness.reference.worker import WorkerSpec

    spec = WorkerSpec(args.ipc, rank=args.rank, pp=args.pp, root=args.root, capacity=args.capacity,
                      config=ListenerConfig(drain_timeout=args.drain_timeout))
    return serve(spec)


def _cmd_ctl_list(args: argparse.Namespace) -> int:
    from harness.reference.ctl import list_instances
    from harness.reference.paths import default_root

    rows: list[tuple[str, ...]] = [("kind", "ipc", "rank/pp", "pid", "state", "path")]
    for inst in list_instances(args.root, args.shm_dir):
        for a in inst.artifacts:
            where = f"{a.rank}/{a.pp}" if a.rank is not None else "-"
            rows.append((a.kind, a.ipc, where, str(a.owner.pid) if a.owner else "-", a.state, str(a.path)))
    if len(rows) == 1:
        print(f"no lastcall instances under {args.root or default_root()} or in {args.shm_dir}")
    else:
        table(rows)
    return EXIT_OK


def _cmd_ctl_delete(args: argparse.Namespace) -> int:
    from harness.reference.ctl import delete_instance

    removed = delete_instance(args.ipc, args.root, args.shm_dir, force=args.force)
    for path in removed:
        print(f"removed {path}")
    if not removed:
        print(f"nothing to delete for {args.ipc}")
    return EXIT_OK


def _cmd_ctl_sweep(args: argparse.Namespace) -> int:
    from harness.reference.ctl import sweep

    result = sweep(args.root, args.shm_dir)
    for path in result.removed:
        print(f"removed {path}")
    for inst in result.kept:
        print(f"kept {inst.ipc} (live pid {', '.join(str(o.pid) for o in inst.live_owners)})")
    if not result.removed:
        print("nothing to sweep")
    return EXIT_OK
