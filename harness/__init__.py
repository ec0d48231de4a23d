"""lastcall: a test-and-fault-injection harness for the shutdown paths of LLM-serving listeners.

The distribution is ``lastcall``; the import package is ``harness``.
"""

from __future__ import annotations

from harness.errors import HarnessError, TargetError

__all__ = ["HarnessError", "TargetError", "__version__"]
__version__ = "0.1.0"
