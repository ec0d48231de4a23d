"""A planted bug for tests/test_pipeline_owed.py: a listener that, once stop has begun, writes half of each
reply frame and closes the connection (a drain that "answers" by cutting the reply mid-frame).

``reference@tests.lc_cut_reply_target:CutsReplyAtStop``: the reference listener, but every reply sent after
stop began is cut in the middle of its frame.  The ``pipeline`` step once took such a cut for a request the
listener never read (both ended in ``PeerClosed``), so a stopping pipeline passed on it.
"""

from __future__ import annotations

from typing import Any

from harness.reference import wire
from harness.reference.listener import WorkerListener


class CutsReplyAtStop(WorkerListener):
    def _send(self, conn: Any, reply: wire.Reply) -> None:
        if not self.stopping:
            super()._send(conn, reply)
            return
        frame = wire.encode_reply(reply)
        try:
            conn.sock.send(frame[: len(frame) // 2])  # half of it: the header and part of the body
        except OSError:
            pass
        self._close(conn, why="planted: reply cut at stop")
