"""A planted bug for tests/test_refused.py, modelled on the mutation measurement's survivor
``harness/reference/serving.py::ServingLoop._call_backend::remove:5a073d`` (docs/mutation.md): a listener that
drops the error reply of a
request its backend refuses.

``reference@tests.lc_refusal_target:RefusalUnanswered``: the reference listener, but a
:class:`~harness.errors.BackendError` from the backend (a bad offset's ``BadRequest``) makes no reply, as the
mutant's removed ``return`` did: the serving thread then fails on the missing reply and dies, so the refused
request and every later one go unanswered.
"""

from __future__ import annotations

from typing import Any

from harness.errors import BackendError
from harness.reference.listener import WorkerListener


class RefusalUnanswered(WorkerListener):
    def _call_backend(self, req: Any) -> Any:  # no failpoint site: the tests that use it arm none
        try:
            reply = self.backend.handle(req)
        except BackendError:
            return None  # the mutant: the error reply is never made
        reply.id = req.id
        return reply
