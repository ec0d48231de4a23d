"""In-repo pytest wiring only: the plugin itself is harness/plugin.py (entry point ``lastcall``)."""
