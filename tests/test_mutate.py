"""The mutator and lastcall mutate's input checks (fast: nothing is run against a mutant here).

Each operator is shown on a small module: the edit it makes, what it leaves alone (docstrings, pass,
instrumentation calls, signatures, f-strings), that every mutant compiles and keeps the file's line count,
and that ids are unique and stable.  The command's bad input exits 2 with one located line.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from lc_helpers import ROOT

from harness.errors import ConfigError
from harness.mutate.mutator import apply, diff_of, mutants_of
from harness.mutate.plan import choose
from harness.mutate.run import _copy, resolve, scenarios_for

SMALL = textwrap.dedent('''\
    import threading

    from harness import failpoints


    class L:
        def __init__(self, flag: bool = False) -> None:
            self._lock = threading.Lock()
            self.n = 0

        def stop(self, limit=3):
            """A docstring is never mutated."""
            failpoints.hit("cleanup.unlink")
            self.rec.emit("stop_started", n=1, ok=True)
            with self._lock:
                if self.n < limit:
                    self.n += 1
            pass
            return True

        def ok(self):
            return self.n == 0

        def msg(self):
            return f"{self.n + 1} left"


    def free(x):
        while x is not None:
            x = None
        return x
    ''')


def _by_op(ms: list, op: str) -> list:  # type: ignore[type-arg]
    return [m for m in ms if m.op.rstrip("0123456789") == op]


def test_each_operator_makes_its_edit_and_nothing_else() -> None:
    ms = mutants_of(SMALL, "small.py")
    texts = {m.id: apply(SMALL, m) for m in ms}
    assert len(texts) == len(ms), "ids are unique"
    assert {m.op.rstrip("0123456789") for m in ms} == {"remove", "negate", "unlock", "flip_return", "compare",
                                                      "constant"}
    unlock = _by_op(ms, "unlock")
    assert len(unlock) == 1 and "if True:\n" in texts[unlock[0].id] and "with self._lock" not in texts[unlock[0].id]
    negate = {m.about for m in _by_op(ms, "negate")}
    assert negate == {"condition `self.n < limit` negated", "condition `x is not None` negated"}
    compare = {m.about for m in _by_op(ms, "compare")}
    # < -> <= as a condition (not its negation); `is not` as a whole condition is left to negate, and a
    # returned `==` to flip_return (its swap would be the same mutant)
    assert compare == {"`self.n < limit` -> `self.n <= limit`"}  # `return self.n == 0` is flip_return's
    flips = {m.about for m in _by_op(ms, "flip_return")}
    assert flips == {"`return True` -> `return False`", "`return self.n == 0` -> `return not (...)`"}
    # self.n = 0, += 1 and == 0; not the f-string's 1, not the signature's defaults
    assert sorted(m.about for m in _by_op(ms, "constant")) == ["`0` -> `1`", "`0` -> `1`", "`1` -> `2`"]
    removed = {m.about for m in _by_op(ms, "remove")}
    assert "`self.n += 1` removed" in removed and "`return x` removed" in removed
    assert not any("emit" in a or "failpoints" in a or "docstring" in a or "pass" in a for a in removed)
    for m in ms:
        text = texts[m.id]
        compile(text, m.id, "exec")
        assert text != SMALL and text.count("\n") == SMALL.count("\n"), m.id
    # the signature's defaults (flag=False, limit=3) and the instrumentation's arguments are not mutated
    assert not any(m.line in (7, 11, 14) and m.op == "constant" for m in ms)


def test_only_the_functions_named_are_mutated_and_ids_are_stable() -> None:
    ms = mutants_of(SMALL, "small.py", ["free"])
    assert {m.qualname for m in ms} == {"free"} and ms == mutants_of(SMALL, "small.py", ["free"])
    assert [m.id.rsplit(":", 1)[0] for m in ms] == ["small.py::free::negate", "small.py::free::remove",
                                                    "small.py::free::remove"]
    assert len({m.id for m in ms}) == 3
    with pytest.raises(KeyError, match=r"L\.nope"):
        mutants_of(SMALL, "small.py", ["L.stop", "L.nope"])


def test_a_closure_is_mutated_under_its_own_qualname_and_never_as_its_outer_function() -> None:
    """A function defined inside another is named as Python's __qualname__ names it (outer.<locals>.inner, at any
    depth of the outer's blocks); the outer's mutants leave its body alone."""
    src = textwrap.dedent('''\
        def outer(o):
            if o:
                def inner(x):
                    x.stop()
                    return x
            else:
                class K:
                    def m(self):
                        self.n = 1
            return inner
        ''')
    import ast

    from harness.mutate.mutator import functions_of

    assert list(functions_of(ast.parse(src))) == ["outer", "outer.<locals>.inner", "outer.<locals>.K.m"]
    assert {m.about for m in mutants_of(src, "c.py", ["outer"])} == {"condition `o` negated", "`return inner` removed"}
    inner = mutants_of(src, "c.py", ["outer.<locals>.inner"])
    assert [m.id.rsplit(":", 1)[0] for m in inner] == ["c.py::outer.<locals>.inner::remove"] * 2
    assert {m.line for m in inner} == {4, 5}
    assert [m.about for m in mutants_of(src, "c.py", ["outer.<locals>.K.m"])] == ["`self.n = 1` removed",
                                                                                  "`1` -> `2`"]


def test_an_id_follows_its_statement_not_its_line() -> None:
    """Lines added above a function, or a statement above the edited one, leave every id as it was; an edited
    statement's mutants get new ids; two identical edits of one function are told apart."""
    before = {m.id: m for m in mutants_of(SMALL, "small.py")}
    moved = {m.id: m for m in mutants_of("import os\n# a comment\n\n" + SMALL, "small.py")}
    assert set(moved) == set(before) and all(moved[k].line == before[k].line + 3 for k in before)
    free = [m for m in before.values() if m.qualname == "free"]
    target = free[0]
    line = SMALL.splitlines()[target.line - 1]
    edited = SMALL.replace(line, line.replace("while ", "while 1 and "), 1)
    assert edited != SMALL
    after = {m.id for m in mutants_of(edited, "small.py", ["free"])}
    assert target.id not in after and {m.id for m in free[1:]} <= after
    twice = "def g(a):\n    a.x()\n    a.x()\n"
    assert [m.id.rsplit(":", 1)[1] for m in mutants_of(twice, "g.py")][1].endswith(".2")


def test_a_multi_line_edit_keeps_the_line_count_and_the_diff_shows_it() -> None:
    src = "def f(a, b):\n    if (a <\n            b):\n        return 1\n    return 2\n"
    ms = mutants_of(src, "m.py")
    cmp = next(m for m in ms if m.op == "compare")
    assert apply(src, cmp).count("\n") == src.count("\n")
    compile(apply(src, cmp), "m", "exec")
    d = diff_of(src, cmp)
    assert d.startswith("--- a/m.py\n+++ b/m.py\n") and "a <= b" in d


def test_the_sample_is_seeded_and_only_names_known_mutants() -> None:
    ms = mutants_of(SMALL, "small.py")
    a = choose(ms, sample=4, seed=7)
    assert a == choose(ms, sample=4, seed=7) and len(a) == 4
    assert [m.id for m in a] == sorted((m.id for m in a), key=[m.id for m in ms].index)  # in source order
    assert choose(ms, sample=None, seed=7) == ms
    assert choose(ms, sample=99, seed=7, only=[ms[2].id]) == [ms[2]]
    with pytest.raises(ConfigError, match=r"--only small.py:99:1:remove: no such mutant; did you mean"):
        choose(ms, sample=None, seed=1, only=["small.py:99:1:remove"])


def test_a_mutant_is_written_only_into_the_copy(tmp_path: Path) -> None:
    subject = resolve("harness.reference.registry:Registry.stop_all")
    assert subject.root == ROOT and subject.top == "harness" and subject.rel == "harness/reference/registry.py"
    before = subject.file.read_bytes()
    m = subject.mutants()[0]
    _copy(subject, tmp_path, m)
    assert subject.file.read_bytes() == before
    assert (tmp_path / subject.rel).read_text() == apply(before.decode(), m) != before.decode()
    assert (tmp_path / "harness" / "cli.py").read_bytes() == (ROOT / "harness" / "cli.py").read_bytes()
    assert not list(tmp_path.rglob("__pycache__"))


def test_scenarios_are_picked_by_the_listener_they_drive() -> None:
    worker = scenarios_for([str(ROOT / "scenarios")], ("worker",))
    handshake = scenarios_for([str(ROOT / "scenarios")], ("handshake",))
    assert handshake and all(Path(p).name.startswith("handshake-") for p in handshake)
    assert worker and not set(worker) & set(handshake)
    engine = {str(p) for p in (ROOT / "scenarios").glob("*.yaml") if "\ntarget: engine_standin" in p.read_text()}
    assert engine and not engine & (set(worker) | set(handshake))


def _lastcall(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *argv: str) -> tuple[int, str,
                                                                                                        str]:
    from harness.cli import main

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "path", list(sys.path))  # resolve() puts the working directory on it
    rc = main(["mutate", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize(("argv", "message"), [
    (["nope.listener", "--target", "reference"],
     "lastcall: error: mutate: nope.listener: cannot mutate it: ModuleNotFoundError: No module named 'nope'"),
    (["harness.reference.registry:Registry.stop_all,Nope.stop", "--target", "reference"],
     f"lastcall: error: {ROOT}/harness/reference/registry.py: no function Nope.stop in harness.reference.registry "
     "(its functions: Registry.__init__,"),
    (["tests.thirdparty.listener", "--target", "nosuch"], "lastcall: error: mutate: --target: unknown target "
                                                          "'nosuch'"),
    (["harness.reference.registry", "--target", "reference", "no/such/dir"],
     "lastcall: error: mutate: no/such/dir: no such scenario file or directory"),
    (["harness..registry", "--target", "reference"], "lastcall: error: mutate: 'harness..registry': 'harness.."),
    (["harness.reference.registry"], "lastcall mutate: error: the following arguments are required: --target"),
    (["harness.reference.registry", "--target", "reference", "--sample", "0"],
     "lastcall mutate: error: argument --sample: 0 must be between 1 and 100000"),
])
def test_bad_input_exits_2_with_one_located_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    rc, out, err = _lastcall(capsys, monkeypatch, *argv)
    assert rc == 2, err
    assert out == "" and err.count("\n") == 1 and err.startswith(message), err


def test_an_unknown_mutant_id_exits_2_before_anything_runs(capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    rc, out, err = _lastcall(capsys, monkeypatch, "harness.reference.registry:Registry.stop_all", "--target",
                             "reference", "--only", "x:1:0:remove",
                             str(ROOT / "scenarios" / "exit-hook-stops-what-is-left.yaml"))
    assert rc == 2 and err.startswith("lastcall: error: --only x:1:0:remove: no such mutant"), err
    assert "unmutated" not in out  # refused before the unmutated run


def test_the_report_gives_both_scores_every_survivor_with_its_diff_and_a_wrong_equivalent() -> None:
    from harness.mutate.analysis import Analysis, print_report, to_json
    from harness.mutate.plan import Entry
    from harness.mutate.run import KILLED, SURVIVED, TIMEOUT, Outcome

    ms = mutants_of(SMALL, "small.py", ["L.stop"])
    eq = Entry(ms[1].id, "x", "no one can tell", "same_behaviour", "tests/test_mutate.py::t")
    wrong = Entry(ms[2].id, "x", "claimed", "unreachable", "tests/test_mutate.py::t")
    a = Analysis([Outcome(ms[0], KILLED, 1.0, ["scenarios/a.yaml::a[tp1]"]), Outcome(ms[1], SURVIVED, 2.0),
                  Outcome(ms[2], TIMEOUT, 3.0), Outcome(ms[3], SURVIVED, 2.0)],
                 {eq.id: eq, wrong.id: wrong}, {}, {"small.py": SMALL}, len(ms), planned=4)
    lines: list[str] = []
    print_report(a, lines.append)
    text = "\n".join(lines)
    # raw: 2 killed of 4; non-equivalent: ms[1] is left out (ms[2] too: listed, but killed, so reported wrong)
    assert lines[0] == "raw score 2/4 (50.0 %); non-equivalent 1/2 (50.0 %); 2 equivalent"
    assert f"equivalent (same_behaviour) {ms[1].id}" in text and "why: no one can tell" in text
    assert f"survivor {ms[3].id}  small.py:{ms[3].line}  L.stop: {ms[3].about}" in text
    assert diff_of(SMALL, ms[3]).splitlines()[3] in text  # the diff, indented
    assert f"WRONG: {ms[2].id} is listed in mutation/equivalent.yaml but was killed by timeout" in text
    data = to_json(a, sample=4, seed=1, target=None, command="x")
    assert data["raw"] == {"killed": 2, "all": 4} and data["non_equivalent"] == {"killed": 1, "all": 2}
    assert data["machine"]["cpus"] and data["date"] and data["command"] == "x"  # the line under its table
    assert [m["status"] for m in data["mutants"]] == [KILLED, SURVIVED, TIMEOUT, SURVIVED]
    assert data["mutants"][0]["failed"] == ["a.yaml::a[tp1]"] and "diff" in data["mutants"][3]


def test_the_segments_of_a_source_split_once_are_asts_own() -> None:
    """mutants_of takes each node's text from the source split once (ast.get_source_segment splits it again on
    every call): the same text for the statements and expressions of the four stop-path files (one in fifty), and
    for each of a source with CR, CR LF, a form feed and characters of several UTF-8 bytes, where two ways of
    counting lines and columns can part."""
    import ast

    from harness.mutate.mutator import _Segments

    odd = "x = 1\r\ny = (2 +\r 3)\nif x:\n\x0c    z = 'é€😀' + str(y)  # é\n    w = [z,\n         'ü']\n"
    sources = [odd] + [(ROOT / "harness" / "reference" / f"{f}.py").read_text()
                       for f in ("listener", "registry", "worker", "handshake")]
    for source in sources:
        segment = _Segments(source)
        nodes = [n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.expr, ast.stmt))]
        assert len(nodes) > 10
        for node in nodes if source is odd else nodes[::50]:  # ast's own way splits the file at each node
            assert segment(node) == ast.get_source_segment(source, node), ast.dump(node)[:200]
