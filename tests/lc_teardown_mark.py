"""Holds the mark of tests/lc_teardown_target.py: a module nothing else refers to, so the interpreter's module
teardown frees its globals (and runs the mark's ``__del__``) when it removes it from sys.modules."""

HELD: list[object] = []
