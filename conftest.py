"""In-repo pytest wiring only: the plugin itself is harness/plugin.py (entry point ``lastcall``)."""

import os

# lastcall's own suite checks every recorded event against harness.events (a bad one breaks the run);
# set before any recorder exists, and inherited by every process a test starts
os.environ.setdefault("LASTCALL_STRICT_EVENTS", "1")
