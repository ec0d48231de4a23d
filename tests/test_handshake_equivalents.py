"""The tests mutation/equivalent.yaml names for mutants of harness/reference/handshake.py: each shows that what
anyone can observe of the mutant is what they observe of the reference.

``handshake.py::HandshakeListener._request_stop::constant:b44a38`` (``self._wake_w >= 0`` -> ``>= 1``) and
``compare:959704`` (``> 0``): ``_wake_w`` is only ever -1 or the write end of ``os.pipe2``, and the kernel gives
a pipe's read end the lowest free descriptor and its write end the next one, so the write end is at least 1:
the two conditions agree on every value the field takes.

``handshake.py::HandshakeListener._run::remove:588671`` (``assert isinstance(endpoint, bytes)`` removed): the
option is a bytes option in pyzmq, so the assert can never fail; without it the same line decodes the same
bytes.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

import zmq
from lc_helpers import ROOT

SOURCE = (ROOT / "harness/reference/handshake.py").read_text()


def _method(name: str) -> ast.FunctionDef:
    cls = next(n for n in ast.walk(ast.parse(SOURCE)) if isinstance(n, ast.ClassDef) and n.name == "HandshakeListener")
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)


def _stores_of(attr: str) -> list[tuple[str, str]]:
    """(method, assigned expression) for every assignment to ``self.<attr>`` in HandshakeListener."""
    cls = next(n for n in ast.walk(ast.parse(SOURCE)) if isinstance(n, ast.ClassDef) and n.name == "HandshakeListener")
    found = []
    for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    elts = target.elts if isinstance(target, ast.Tuple) else [target]
                    if any(isinstance(t, ast.Attribute) and t.attr == attr for t in elts):
                        found.append((fn.name, ast.unparse(node.value)))
    return found


def test_the_wake_pipes_write_end_is_never_0_so_ge_1_and_gt_0_test_what_ge_0_does() -> None:
    stores = _stores_of("_wake_w")
    assert sorted(stores) == [("__init__", "(-1, -1)"), ("_release", "-1"),
                              ("start", "os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)")], stores
    # The lowest descriptors free (0 and 1 closed), as low as a write end can come: it is still 1.
    probe = textwrap.dedent("""
        import os
        os.close(0); os.close(1)
        r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        os.write(2, f"{r} {w}".encode())
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=30, check=True)
    assert out.stderr.split() == ["0", "1"]
    for w in (-1, 1, 2, 1000):  # every value the field can hold: the three conditions agree
        assert (w >= 0) == (w >= 1) == (w > 0)


def test_the_endpoint_assert_always_holds_so_removing_it_changes_nothing() -> None:
    run = ast.unparse(_method("_run"))
    assert "endpoint = router.getsockopt(zmq.LAST_ENDPOINT)" in run
    assert "assert isinstance(endpoint, bytes)" in run
    ctx: zmq.Context[object] = zmq.Context()
    try:
        for kind, where in ((zmq.ROUTER, "tcp://127.0.0.1:*"), (zmq.ROUTER, "tcp://127.0.0.1:0")):
            sock = ctx.socket(kind)
            try:
                sock.setsockopt(zmq.LINGER, 0)
                sock.bind(where)
                endpoint = sock.getsockopt(zmq.LAST_ENDPOINT)
                assert isinstance(endpoint, bytes)
                assert int(endpoint.decode().rsplit(":", 1)[1]) > 0
            finally:
                sock.close(linger=0)
    finally:
        ctx.term()
