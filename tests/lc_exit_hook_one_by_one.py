"""A planted bug for tests/test_exit_hook_rest.py, modelled on the mutation measurement's survivor
``harness/reference/registry.py::Registry.exit_hook::remove:5d1c0a`` (docs/mutation.md): an exit hook that does not
tell every
listener to stop before it waits for the first.

``tests.lc_exit_hook_one_by_one:ONE_BY_ONE``: the reference, but its registry's exit hook stops the listeners
one after another within its one budget.  A first listener that cannot drain takes the whole budget; the
ones after it are stopped with none of it left (a stop with timeout 0 begins and returns False at once) and
stay registered and serving.
"""

from __future__ import annotations

import time

from harness.reference.registry import Registry
from harness.reference.variants import Variant


class OneByOne(Registry):
    def exit_hook(self) -> None:  # the reference's, less its loop that begins every stop first
        left = self.listeners()
        self.rec.emit("exit_hook_started", listeners=len(left), budget=self.exit_budget)
        deadline = time.monotonic() + self.exit_budget
        ok = True
        for listener in left:
            if listener.stop(max(0.0, deadline - time.monotonic())):
                self._forget(self.key_of(listener), listener)
            else:
                ok = False
        self.rec.emit("exit_hook_finished", ok=ok, left=len(self))


ONE_BY_ONE = Variant("exit_hook_one_by_one", "the exit hook stops its listeners one after another within its one "
                     "budget: a stuck first one leaves the others none of it", registry=OneByOne)
