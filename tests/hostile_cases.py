"""The hostile inputs, one per kind: how each is made, how lastcall is given it, what it must say.

Small inputs are files in fixtures/hostile/; large or special ones (a 64 MiB file,
5000 nested lists, a FIFO, a directory) are made at run time under a temporary
directory.  ``fixtures/hostile/NAME.expected`` is the exact stderr of the command,
``{path}`` standing for the input's path; every case exits 2.

Run as a script, this module is the child process the tests and the benchmark
start (under RLIMIT_AS and a timeout, as safety nets)::

    python tests/hostile_cases.py TMPDIR [NAME ...]     # prints {name: [rc, stdout, stderr]} as JSON

Each case goes through ``harness.cli.main`` in that one process (the command line
lastcall runs, without an interpreter start per case).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lc_helpers import ROOT

HOSTILE = Path("fixtures/hostile")  # relative: the tests and the benchmark run from the repository root
GOOD = "fixtures/good-scenario.yaml"
HEAD = """\
name: hostile
about: One kind of hostile input; the rest of the file is a valid scenario.
catches: [no_conn_tracking]
"""
TAIL = """\
steps:
  - start: cluster
  - stop: {as: s1}
  - wait: {returned: s1}
expect: [no_late_dispatch]
"""


def _write(name: str, text: str) -> Callable[[Path], str]:
    def make(tmp: Path) -> str:
        path = tmp / name
        path.write_text(text)
        return str(path)

    return make


def _many(line: str, n: int) -> str:
    """A scenario whose steps are ``line`` ``n`` times between a start and a stop: each step within its own
    limits, the run they make over one of its totals (harness.scenario.budget)."""
    return HEAD + TAIL.replace("  - start: cluster\n", "  - start: cluster\n" + line * n)


def _huge(tmp: Path) -> str:
    """A scenario of exactly 64 MiB whose one mistake is on its last line."""
    path = tmp / "huge.yaml"
    last = "expect: [no_late_dispatch]  # the mistake: a second expect key\n"
    line = "# a comment line, to make the file large\n"
    pad = (64 << 20) - len(HEAD + TAIL) - len(last)
    chunk = line * ((1 << 20) // len(line))
    with open(path, "w") as f:  # in chunks: whoever makes the file stays small
        f.write(HEAD + TAIL)
        for _ in range(pad // len(chunk)):
            f.write(chunk)
        rest = pad % len(chunk)
        f.write(line * (rest // len(line)) + "#" * (rest % len(line) - 1) + "\n")
        f.write(last)
    assert path.stat().st_size == 64 << 20
    return str(path)


def _fifo(tmp: Path) -> str:
    path = tmp / "fifo.yaml"
    os.mkfifo(path)  # nothing ever writes to it: reading it would block for ever
    return str(path)


def _directory(tmp: Path) -> str:
    path = tmp / "workload.yaml"
    path.mkdir()
    return str(path)


@dataclass(frozen=True)
class Case:
    """One hostile input: ``argv`` of lastcall with ``{path}`` for the input, made by ``make`` (else the fixture
    fixtures/hostile/NAME.yaml, or ``path`` as given)."""

    name: str
    argv: tuple[str, ...] = ("validate", "{path}")
    make: Callable[[Path], str] | None = None
    path: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    def input(self, tmp: Path) -> str:
        if self.make is not None:
            return self.make(tmp)
        return self.path if self.path is not None else str(HOSTILE / f"{self.name}.yaml")

    def expected(self, path: str) -> str:
        """The exact stderr, from fixtures/hostile/NAME.expected."""
        return (HOSTILE / f"{self.name}.expected").read_text().replace("{path}", path)


def _env(value: str) -> Case:
    name = "env-scale-" + {"-1": "negative"}.get(value, value)
    return Case(name, path=GOOD, env={"LASTCALL_TIMEOUT_SCALE": value})


CASES: tuple[Case, ...] = (
    Case("aliases-bomb"),
    Case("deep-nesting", make=_write("deep.yaml", HEAD + "topology: {tp: " + "[" * 5000 + "]" * 5000 + "}\n" + TAIL)),
    Case("huge-file", make=_huge),
    Case("fifo", make=_fifo),
    Case("dev-zero", path="/dev/zero"),
    Case("empty"),
    Case("non-utf8"),
    Case("tp-huge"),
    Case("long-int", make=_write("long-int.yaml", HEAD + "seed: " + "7" * 5000 + "\n" + TAIL)),
    Case("too-many-values", make=_write("values.yaml", HEAD + "marks: [" + ", ".join(["slow"] * 20_000) + "]\n"
                                         + TAIL)),
    Case("recursive-alias"),
    Case("duration-too-long"),
    Case("matrix-too-large"),
    Case("workers-too-many"),
    _env("inf"), _env("nan"), _env("1e308"), _env("-1"),
    # a run's totals (harness.scenario.budget): each step within its limits, the steps together past one
    Case("padded-replies", make=_write("padded.yaml", _many(
        "  - send: {cmd: kv_tensors_created, fault: never_read, reply_size: 1000000}\n", 500))),
    Case("pipelines-in-flight", make=_write("pipelines.yaml", _many(
        "  - pipeline: {requests: [{cmd: kv_tensors_created}]}\n", 200))),
    Case("connections-too-many"),
    Case("rounds-too-many"),
    Case("ipc-dots"),
    Case("step-name-too-long"),
    Case("workload-deep", argv=("bench", "--workload", "{path}"),
         make=_write("workload.yaml", "ops: " + "[" * 5000 + "]" * 5000 + "\n")),
    Case("workload-windows", argv=("bench", "--workload", "{path}")),
    Case("workload-directory", argv=("bench", "--workload", "{path}"), make=_directory),
)
BY_NAME = {c.name: c for c in CASES}


def run(case: Case, tmp: Path) -> tuple[int, str, str, str]:
    """Run one case through harness.cli.main in this process: (rc, stdout, stderr, the input's path)."""
    from harness.cli import main

    path = case.input(tmp)
    saved = {k: os.environ.get(k) for k in case.env}
    os.environ.update(case.env)
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main([a.replace("{path}", path) for a in case.argv])
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return rc, out.getvalue(), err.getvalue(), path


def _main(argv: list[str]) -> int:
    tmp, names = Path(argv[0]), argv[1:] or [c.name for c in CASES]
    results = {}
    for name in names:
        case_dir = tmp / name
        case_dir.mkdir()
        results[name] = run(BY_NAME[name], case_dir)
        for made in sorted(case_dir.rglob("*"), reverse=True):  # the 64 MiB file does not outlive the run
            if made.is_dir():
                made.rmdir()
            else:
                made.unlink()
    json.dump(results, sys.stdout)
    return 0


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    sys.exit(_main(sys.argv[1:]))
