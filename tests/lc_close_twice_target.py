"""A planted bug for tests/test_closed_once.py, modelled on the mutation measurement's survivor
``harness/reference/serving.py::ServingLoop._close::remove:def028`` (docs/mutation.md): a listener whose
``_close`` does not return
when the connection is already closed.

``reference@tests.lc_close_twice_target:ClosesTwice``: the reference listener, but a connection closed once
(its reply failed: the client was gone) is closed again for the lost framing, and recorded closed twice.  On a
Python socket the second close is harmless; a listener of raw descriptors would close a descriptor number the
process may have handed out again.
"""

from __future__ import annotations

from harness.reference.listener import WorkerListener, _Conn


class ClosesTwice(WorkerListener):
    def _close(self, conn: _Conn, *, why: str) -> None:  # the reference's, less its already-closed return
        with self._lock:
            self._conns.pop(conn.sock.fileno(), None)
        conn.sock.close()
        conn.bodies.clear()
        conn.out.clear()
        if self._on:
            self.rec.emit("connection_closed", listener=self.label, conn=conn.cid, why=why)
