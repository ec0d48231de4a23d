"""The stop contract of DESIGN.md as executable checks, and the table of what each catches.

``CHECKS`` lists one or more checks per contract line; each names the planted-bug
variants it must catch.  :func:`run_check` runs one check against one variant in
a fresh private socket root and returns an :class:`Outcome`.
"""

from __future__ import annotations

import shutil
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.contract import lines
from harness.contract.exit_probe import exit_hook_bounded, exit_hook_retries
from harness.contract.rig import ContractViolation
from harness.names import temp_root
from harness.reference.variants import Variant
from harness.reference.wire import PeerClosed

__all__ = ["Check", "CHECKS", "Outcome", "run_check", "ContractViolation"]

CheckFn = Callable[[Variant, Path], None]


@dataclass(frozen=True)
class Check:
    """One executable check of contract line ``line``; ``catches`` names the variants it must fail on."""

    line: int
    name: str
    fn: CheckFn
    catches: tuple[str, ...]

    @property
    def about(self) -> str:
        doc = (self.fn.__doc__ or "").strip()
        return doc.split(". ", 1)[-1] if doc[:1].isdigit() else doc


CHECKS: tuple[Check, ...] = (
    Check(1, "no_dispatch_after_stop", lines.no_dispatch_after_stop, ("dispatch_after_stop", "cuts_drained_reply")),
    Check(2, "reads_cancelled_at_once", lines.reads_cancelled_at_once, ("no_conn_tracking",)),
    Check(3, "handler_drained", lines.handler_drained, ("teardown_while_alive",)),
    Check(4, "teardown_keeps_other_ranks", lines.teardown_keeps_other_ranks, ("rmtree_dir",)),
    Check(4, "unlink_only_own_socket", lines.unlink_only_own_socket, ("unlink_by_path",)),
    Check(5, "drain_timeout_keeps_everything", lines.drain_timeout_keeps_everything,
          ("timed_join_teardown", "teardown_while_alive")),
    Check(6, "concurrent_stop_waits", lines.concurrent_stop_waits, ("concurrent_stop_true",)),
    Check(6, "stop_from_handler_returns", lines.stop_from_handler_returns, ("stop_from_handler_deadlocks",)),
    Check(6, "cleanup_error_keeps_registration", lines.cleanup_error_keeps_registration,
          ("drop_registration_on_error",)),
    Check(7, "stop_without_socket_path", lines.stop_without_socket_path, ("wake_by_connect",)),
    Check(8, "exit_hook_bounded", exit_hook_bounded, ("unbounded_exit_hook",)),
    Check(8, "exit_hook_retries", exit_hook_retries, ("drop_registration_on_error",)),
    Check(9, "restart_refused_while_draining", lines.restart_refused_while_draining, ("restart_drops_old",)),
    Check(10, "teardown_deferred", lines.teardown_deferred, ("teardown_ignores_stop", "timed_join_teardown")),
    Check(11, "served_while_stalled", lines.served_while_stalled, ("head_of_line_blocking",)),
)


@dataclass(frozen=True)
class Outcome:
    """What one check said about one variant."""

    check: str
    variant: str
    kept: bool
    detail: str
    seconds: float


def run_check(check: Check, variant: Variant, root: Path | None = None) -> Outcome:
    """Run ``check`` against ``variant`` in ``root`` (a fresh temp dir if None, removed after).

    A ContractViolation is a broken line (kept=False); any other exception is
    reported as broken too, with its traceback, since a check must not crash.
    """
    own = root is None
    base = temp_root() if root is None else root
    t0 = time.monotonic()
    try:
        check.fn(variant, base)
        return Outcome(check.name, variant.name, True, "", time.monotonic() - t0)
    except ContractViolation as exc:
        return Outcome(check.name, variant.name, False, str(exc), time.monotonic() - t0)
    except PeerClosed as exc:  # a reply the check waited for never came: the listener dropped the connection
        return Outcome(check.name, variant.name, False, f"a reply was lost: the listener closed the connection "
                       f"under its request ({exc})", time.monotonic() - t0)
    except Exception as exc:
        detail = f"check crashed: {type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        return Outcome(check.name, variant.name, False, detail, time.monotonic() - t0)
    finally:
        if own:
            shutil.rmtree(base, ignore_errors=True)
