"""Every ``lastcall`` command the README, the docs/ pages and harness's docstrings (and other strings) name
exists, with the options they give it: each is parsed out of the code in the text (markdown code spans and blocks,
backticked spans in harness/**/*.py strings) and its --help is run through harness.cli.main, in one
child process for all of them."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

from lc_helpers import ROOT

WORD = re.compile(r"[a-z][a-z0-9_-]*\Z")  # a subcommand (or a plain argument) word; PATH, --opt, a=b end it
OPTION = re.compile(r"--?[A-Za-z][A-Za-z0-9-]*")
COMMAND = re.compile(r"(?:^|(?<=[\s`/$(]))lastcall((?: +[^\s`'\")]+)+)")  # `lastcall WORD...` in code

# Prints, per argv, main's exit code and what it wrote (the --help text). One interpreter for all.
CHILD = """
import contextlib, io, json, sys
from harness.cli import main
out = []
for argv in json.load(sys.stdin):
    buf, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
        rc = main(argv)
    out.append({"argv": argv, "rc": rc, "out": buf.getvalue(), "err": err.getvalue()[-400:]})
print(json.dumps(out))
"""


def readme_code(text: str) -> list[tuple[int, str]]:
    """(line, code) of each fenced or indented code line and each inline code span of a markdown text."""
    out: list[tuple[int, str]] = []
    prose: list[str] = []
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            prose.append("")
        elif fenced or line.startswith("    "):
            out.append((n, line))
            prose.append("")
        else:
            prose.append(line)
    rest = "\n".join(prose)
    for m in re.finditer(r"(`+)(.+?)\1", rest, re.S):
        out.append((rest.count("\n", 0, m.start()) + 1, m.group(2).replace("\n", " ")))
    return out


def python_code(path: Path) -> list[tuple[int, str]]:
    """(line, span) of each backticked span (to the end of the string when it is not closed) in every
    string constant of a module: docstrings, messages that tell a user what to run, f-string parts."""
    return [(node.lineno, span) for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) for span in spans(node.value)]


def spans(text: str) -> list[str]:
    """The backticked spans of ``text`` (`x` or ``x``), and an unclosed last one to the end of the text
    (an f-string's part: "`lastcall fetch kvcached==" then the version)."""
    out, end = [], 0
    for m in re.finditer(r"(`+)(.+?)\1", text, re.S):
        out.append(m.group(2))
        end = m.end()
    tail = re.search(r"`+(.+)", text[end:], re.S)
    return [*out, tail.group(1)] if tail else out


def documented() -> dict[tuple[str, ...], dict[str, set[str]]]:
    """command words -> {where (file:line): options named with it}, over README.md, docs/*.md and
    harness/**/*.py."""
    found: dict[tuple[str, ...], dict[str, set[str]]] = {}
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    sources = [(p, readme_code(p.read_text())) for p in pages]
    sources += [(p, python_code(p)) for p in sorted((ROOT / "harness").rglob("*.py"))]
    for path, snippets in sources:
        for line, code in snippets:
            for m in COMMAND.finditer(code):
                tokens = m.group(1).split()
                if "--" in tokens:  # what follows a bare -- goes to pytest
                    tokens = tokens[:tokens.index("--")]
                words = tuple(t for t in _leading(tokens))
                if not words:
                    continue
                options = {o.group(0) for t in tokens[len(words):] if (o := OPTION.match(t))}
                where = f"{path.relative_to(ROOT)}:{line}"
                found.setdefault(words, {}).setdefault(where, set()).update(options)
    return found


def _leading(tokens: list[str]) -> list[str]:
    out = []
    for t in tokens:
        if not WORD.match(t):
            break
        out.append(t)
    return out


def test_the_parser_finds_commands_in_code_not_prose() -> None:
    text = ("lastcall is a harness; run `lastcall run scenarios --target x -- -x --junitxml=j.xml` or\n"
            "`lastcall\nctl sweep`, then:\n\n    .venv/bin/lastcall report reports/1/history.jsonl --out d\n"
            "```bash\n$ lastcall list --targets\n```\nlastcall finds things.\n")
    snippets = readme_code(text)
    got = sorted((tuple(_leading(m.group(1).split())), line) for line, code in snippets
                 for m in COMMAND.finditer(code))
    assert got == [(("ctl", "sweep"), 2), (("list",), 7), (("report",), 5), (("run", "scenarios"), 1)]
    assert [c for _, c in snippets if "--target x" in c] == ["lastcall run scenarios --target x -- -x --junitxml=j.xml"]
    assert spans("see ``lc-<tag>*`` and ``x`` for what lastcall threads leave; run `lastcall fetch k==") == [
        "lc-<tag>*", "x", "lastcall fetch k=="]


def problems_of(docs: dict[tuple[str, ...], dict[str, set[str]]]) -> list[str]:
    """One line per documented command whose --help fails, or whose help lacks an option named with it."""
    argvs = [[*words, "--help"] for words in sorted(docs)]
    proc = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(argvs), capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.splitlines()[-1])
    problems = []
    for words, r in zip(sorted(docs), results, strict=True):
        places = docs[words]
        if r["rc"] != 0:
            first = r["err"].strip().splitlines()[-1:] or [""]
            problems.append(f"lastcall {' '.join(words)} (named at {', '.join(sorted(places))}): --help exits "
                            f"{r['rc']}: {first[0]}")
            continue
        for where, options in sorted(places.items()):
            missing = sorted(o for o in options if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", r["out"]))
            if missing:
                problems.append(f"{where}: lastcall {' '.join(words)} has no option {', '.join(missing)} "
                                "(not in its --help)")
    return problems


def test_a_missing_command_or_option_is_named_with_where_it_is_documented() -> None:
    got = problems_of({("list",): {"a.py:1": {"--targets"}, "README.md:2": set()}, ("ctl", "sweep"): {"b.py:3": set()},
                       ("ctl", "nosuch"): {"c.py:4": set()}, ("nosuch",): {"d.py:5": set()}})
    assert len(got) == 3, got
    assert got[0].startswith("lastcall ctl nosuch (named at c.py:4): --help exits 2: ")
    assert got[1] == "a.py:1: lastcall list has no option --targets (not in its --help)"
    assert got[2].startswith("lastcall nosuch (named at d.py:5): --help exits 2: ") and "invalid choice" in got[2]


def test_every_documented_command_and_option_exists() -> None:
    docs = documented()
    assert ("run", "scenarios") in docs and ("ctl", "sweep") in docs and ("report",) in docs, sorted(docs)
    assert any(w.startswith("docs/") for places in docs.values() for w in places), "docs/*.md not scanned"
    problems = problems_of(docs)
    assert not problems, "\n".join(problems)
