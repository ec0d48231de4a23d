"""The stop contract, line by line, and which oracle proves each line on which planted bug.

:data:`LINES` holds the eleven lines of the stop contract, in full: what every
correct listener guarantees.  For each line, the contract checks of ``lastcall
contract`` (:data:`harness.contract.CHECKS`) record a history and judge it with
the registered checkers (harness/checkers/) they name; what a check asserts that no
checker judges yet is its *harness-side* part, named :data:`HARNESS` in
``Check.by``.  ``also`` names the checkers that judge the line in the scenario
library, on real processes.  docs/stop-contract.md is generated from this module
and the checks (``python -m harness.contract.doc``); a test keeps it equal.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ContractLine", "LINES", "HARNESS", "line"]

HARNESS = "harness-side"  # in Check.by: the check's own assertion, which no checker judges yet


@dataclass(frozen=True)
class ContractLine:
    """One line of the stop contract: its number, a short title, its text, and the checkers of scenarios."""

    number: int
    title: str
    text: str
    also: tuple[str, ...] = ()  # checkers that judge this line in the scenario library (real processes)
    clauses: tuple[str, ...] = ()  # what the scenarios ask of a target beside the line: its lettered lines (6a...)

    def lettered(self) -> list[tuple[str, str]]:
        """(``6a``, text) for each clause, in order."""
        return [(f"{self.number}{chr(ord('a') + i)}", text) for i, text in enumerate(self.clauses)]


LINES: tuple[ContractLine, ...] = (
    ContractLine(1, "nothing is dispatched once stop has begun",
                 "Once stop() has begun, no request whose frame completes after that moment is dispatched, and "
                 "connections accepted after it are closed unread. Requests whose frame completed before but that "
                 "are still queued behind the (serialised) backend are not dispatched either: they get error_type "
                 "shutting_down. The stop_started event and every dispatch decision are taken under one lock, so "
                 "the history orders them exactly.",
                 ("no_late_dispatch",),
                 ("A stop emits stop_started when it begins, before it cancels a read or refuses a request: the "
                  "scenarios wait for it before their next step (`wait: {event: stop_started}`).",)),
    ContractLine(2, "reads in progress are cancelled at once",
                 "Reads in progress (a header sent, the body withheld; an idle kept-alive connection) are cancelled "
                 "at once.",
                 ("reads_cancelled", "stop_latency"),
                 ("A connection is recorded as accepted once accepted, and a request as frame_started once its "
                  "first byte is read: the scenarios wait for each before they stop (idle-client-does-not-block-"
                  "others, stalled-*).",
                  "A stop emits reads_cancelled once it has cancelled the reads in progress (the connections it "
                  "cancelled listed): the scenarios wait for it to release a step held at a racing point "
                  "(frame-held-in-its-decision-while-a-stop-begins, answered-after-a-stop-refuses-the-next-"
                  "request).")),
    ContractLine(3, "a handler inside the backend is drained",
                 "A handler already inside a backend call is drained: stop() waits for it, up to drain_timeout, "
                 "and its reply is still delivered to its client (cancel reads, not writes). A reply its client "
                 "does not read is waited for up to drain_timeout too; then its connection is closed and the stop "
                 "goes on (nothing of the listener is in use by it).",
                 ("handler_drained", "calls_answered"),
                 ("A handler records dispatch_finished when its backend call returns, before it writes the reply "
                  "(unread-reply-is-bounded-by-the-drain waits for it).",)),
    ContractLine(4, "drained: the thread exits, then only what is ours is torn down",
                 "Drained: the serving thread has exited; then, and only then, the server socket is closed, the "
                 "socket file unlinked (only if it is still the one this listener bound: same inode), and its "
                 "directory (and the pp<N> subdirectory, and the instance root) removed once no other rank's socket "
                 "is left in it; another rank's concurrent removal (ENOENT, ENOTEMPTY) is normal, not an error. "
                 "stop() returns True.",
                 ("stop_result", "no_leftover_paths", "requests_served")),
    ContractLine(5, "not drained in time: nothing is torn down, a retry finishes",
                 "Not drained in time: nothing is torn down, the listener stays registered, stop() returns False, "
                 "and a later call (or the exit hook) retries.",
                 ("retained_for_retry", "stop_result")),
    ContractLine(6, "stop is idempotent, thread-safe and never raises",
                 "stop() is idempotent and thread-safe: a concurrent stop never reports True while another is still "
                 "draining. Called from a handler it returns False at once instead of deadlocking. It never raises: "
                 "a cleanup error is False with the registration kept.",
                 ("stop_result", "stop_latency"),
                 ("Each stop that waits for a drain emits its own drain_started as it begins to wait, and "
                  "drain_finished when the wait ends: a stop concurrent with a draining one too, which "
                  "concurrent-stops-wait-for-the-drain waits for before it releases the handler.",)),
    ContractLine(7, "stop never depends on the socket path",
                 "stop() never depends on the socket path: it still works if the file was deleted or replaced "
                 "while live.",
                 ("stop_result", "no_leftover_paths")),
    ContractLine(8, "the exit hook drains with a short, bounded budget",
                 "The exit hook drains with a short, bounded budget: interpreter exit is never stalled for long, "
                 "however many listeners are left.",
                 ("exit_without_stall", "no_leftover_paths", "exit_hook_stops_the_rest")),
    ContractLine(9, "a restart replaces the old listener only if it stops",
                 "start() on a (rank, pp) that is registered replaces the old listener only if it stops; otherwise "
                 "start raises and the old one is left intact.",
                 ("stop_result",)),
    ContractLine(10, "integration shutdown defers allocator teardown",
                 "Integration shutdown defers allocator teardown when stop() returns False, keeping its state for "
                 "the retry; no backend call ever runs after the allocator is torn down.",
                 ("teardown_deferred", "no_dispatch_after_teardown")),
    ContractLine(11, "others are served while one client stalls",
                 "While one client stalls (or sits idle, or does not read its reply), other clients are still "
                 "served: a reply is written without blocking, and what its client has not read yet waits on that "
                 "client's connection alone.",
                 ("served_while_stalled", "requests_served"),
                 ("Bad input is answered, never fatal: a malformed frame gets error_type bad_request where the "
                  "framing still allows a reply, else its connection is closed (and bad_frame recorded where the "
                  "listener can tell one); a well-framed request whose offset is no page's (negative, or not a "
                  "multiple of the 2 MiB page the library's offsets are written in) is refused with bad_request "
                  "and not dispatched; the listener serves everyone else on (malformed-frames-of-every-kind, "
                  "the-listener-records-what-happened).",
                  "A failed accept (out of descriptors) is recorded as accept_failed and the listener keeps "
                  "accepting once it can, without spinning meanwhile (accept-failure-keeps-serving); a connection "
                  "that ends, its client's close included, is recorded as connection_closed.")),
)


def line(number: int) -> ContractLine:
    """Line ``number`` of the stop contract (1 to 11)."""
    return LINES[number - 1]
