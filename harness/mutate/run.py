"""Run the scenarios against each mutant: a temporary copy of the mutated module's package, first on the path.

For each mutant, the top-level package holding the module (``harness`` for the reference, ``tests`` for
``tests.thirdparty.listener``) is copied into a fresh temporary directory, the mutated file is written
there, and ``python -m harness.cli run`` runs the scenarios from that directory with it first on
PYTHONPATH: the run's own process and the fork server it starts (which imports what the harness imports,
its cwd first) both import the copy, and so does every engine and worker forked from it.  The working
tree is never written.  A run that outlasts its timeout is sent SIGTERM (lastcall run cleans up on it),
then SIGKILL: the mutant is "killed by timeout".
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import ConfigError
from harness.mutate.mutator import Mutant, apply, mutants_of

__all__ = ["Subject", "Outcome", "resolve", "run_one", "freeze", "KILLED", "SURVIVED", "TIMEOUT", "ERROR",
           "scenarios_for", "cast_of_file"]

KILLED, SURVIVED, TIMEOUT, ERROR = "killed", "survived", "killed by timeout", "killed by an error"
TERM_GRACE_S = 20.0  # after SIGTERM, how long lastcall run may clean up before SIGKILL
_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+?):?(?: - .*)?$", re.M)


@dataclass
class Subject:
    """A module to mutate: where its file is, and the top-level package (or module) to copy."""

    module: str
    file: Path  # absolute
    root: Path  # the sys.path entry that holds ``top``
    top: str  # the first component of ``module``
    qualnames: list[str] | None  # None: every function of the module
    base: Path | None = None  # a frozen copy of ``top`` (freeze): mutants are made of it and copied from it

    @property
    def rel(self) -> str:
        """The file relative to ``root`` (how ids name it)."""
        return self.file.relative_to(self.root).as_posix()

    def source(self) -> str:
        return ((self.base or self.root) / self.rel).read_text()

    def mutants(self) -> list[Mutant]:
        return mutants_of(self.source(), self.rel, self.qualnames)


def resolve(spec: str, *, where: str = "mutate") -> Subject:
    """``MODULE[:QUALNAME[,QUALNAME...]]`` -> Subject, found as ``python -m`` would from the working directory.

    Error handling: ConfigError (one line, naming the spec) for a module that cannot be found, one that is
        no Python source file, and a qualname the module does not define (with the ones it does).
    """
    module, _, names = spec.partition(":")
    qualnames = [n.strip() for n in names.split(",") if n.strip()] if names else None
    if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", module):
        raise ConfigError(f"{where}: {spec!r}: {module!r} is not a module name; give MODULE[:QUALNAME,...], "
                          f"e.g. mypkg.listener:Listener.stop")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        found = None
        why = f"{type(exc).__name__}: {exc}"
    else:
        why = "no such module"
    origin = found.origin if found is not None else None
    if origin is None or not origin.endswith(".py"):
        if found is not None:
            why = f"it is not a Python source file ({origin})"
        raise ConfigError(f"{where}: {module}: cannot mutate it: {why} (from {os.getcwd()}; the module must be "
                          f"importable from the working directory, as python -m finds it)")
    file = Path(origin).resolve()
    parts = module.split(".")
    up = len(parts) - 1 + (file.name == "__init__.py")
    root = file.parents[up] if up else file.parent
    subject = Subject(module, file, root, parts[0], qualnames)
    if qualnames:
        import ast

        from harness.mutate.mutator import functions_of

        known = functions_of(ast.parse(subject.source()))
        bad = [q for q in qualnames if q not in known]
        if bad:
            raise ConfigError(f"{file}: no function {', '.join(bad)} in {module} (its functions: "
                              f"{', '.join(sorted(known)) or 'none'})")
    return subject


def cast_of_file(path: str) -> str:
    """Which scenarios exercise a reference file: the handshake listener's, or the worker listener's."""
    return "handshake" if Path(path).name.startswith("handshake") else "worker"


def scenarios_for(paths: Sequence[str], casts: Sequence[str]) -> list[str]:
    """The scenario files under ``paths`` that drive one of ``casts`` (worker, handshake, engine), absolute, sorted.

    Error handling: ConfigError listing the files that do not load (lastcall validate says why).
    """
    from harness.scenario import load_many
    from harness.scenario.steps import drives_engine, is_handshake

    scenarios, errors = load_many(list(paths))
    if errors:
        raise ConfigError("; ".join(str(e.errors[0]) for e in errors[:3]) + (" ..." if len(errors) > 3 else ""))
    out = []
    for sc in scenarios:
        this = "handshake" if is_handshake(sc.steps) else "engine" if drives_engine(sc.steps) else "worker"
        if this in casts and sc.source is not None:
            out.append(str(Path(sc.source).resolve()))
    return sorted(out)


@dataclass
class Outcome:
    """One run of the scenarios: against a mutant, or (mutant None) against the unmutated copy."""

    mutant: Mutant | None
    status: str
    seconds: float
    failed: list[str] = field(default_factory=list)  # the items that failed (pytest node ids)
    tail: str = ""  # the last lines of the run's output
    rerun: bool = False  # its first kill was not confirmed (a FLAKY item): this is the whole run once more

    @property
    def killed(self) -> bool:
        return self.status != SURVIVED


def _copy(subject: Subject, into: Path, mutant: Mutant | None) -> None:
    base = subject.base or subject.root
    src = base / subject.top
    if src.is_dir():
        shutil.copytree(src, into / subject.top, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
                        symlinks=True)
    else:
        shutil.copy2(base / f"{subject.top}.py", into / f"{subject.top}.py")
    if mutant is not None:
        (into / subject.rel).write_text(apply(subject.source(), mutant))


@contextlib.contextmanager
def freeze(subjects: Sequence[Subject]) -> Iterator[None]:
    """Snapshot each subject's package once, for the whole run: files edited while it runs (a shared working
    tree) change neither the mutants' offsets nor the code around them."""
    with tempfile.TemporaryDirectory(prefix="lc-mut-base-") as tmp:
        bases: dict[tuple[Path, str], Path] = {}
        for s in subjects:
            key = (s.root, s.top)
            if key not in bases:
                bases[key] = Path(tmp) / str(len(bases))
                bases[key].mkdir()
                _copy(s, bases[key], None)
            s.base = bases[key]
        try:
            yield
        finally:
            for s in subjects:
                s.base = None


def run_one(subject: Subject, mutant: Mutant | None, scenarios: Sequence[str], *, target: str | None,
            timeout: float, echo: Callable[[str], None] | None = None, keyword: str | None = None,
            workers: int | None = None) -> Outcome:
    """Run ``scenarios`` (reference items only, first failure stops) against ``mutant`` in a temporary copy."""
    with tempfile.TemporaryDirectory(prefix="lc-mut-") as tmp:
        here = Path(tmp)
        _copy(subject, here, mutant)
        path = [tmp, str(subject.root), os.getcwd(), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        # each run's exit mode is the scenario's own (harness.scenario.exitmode: a fast exit only where nothing
        # judged can tell); LASTCALL_FAST_EXIT=0 in the environment makes every exit faithful, =1 forces nothing
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(path)),
               "PYTHONDONTWRITEBYTECODE": "1"}
        env.pop("PYTEST_XDIST_WORKER", None)
        env.pop("PYTEST_CURRENT_TEST", None)
        only = f"not catches and ({keyword})" if keyword else "not catches"
        cmd = [sys.executable, "-m", "harness.cli", "run", *scenarios, "-k", only, "--lastcall-reports", "",
               *(["--target", target] if target else []), *(["-n", str(workers)] if workers else []), "-x"]
        start = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            out = _stop(proc)
        except BaseException:  # ^C or SIGTERM of this process: the run (its own session) is stopped too
            _stop(proc)
            raise
        seconds = time.monotonic() - start
    failed = list(dict.fromkeys(_FAILED.findall(out)))
    if timed_out:
        status = TIMEOUT
    elif proc.returncode == 0:
        status = SURVIVED
    elif proc.returncode == 1 or failed:  # (with -n, -x ends the run as interrupted: 130, its failure named)
        status = KILLED
    else:
        status = ERROR
    tail = "\n".join(out.splitlines()[-12:])
    outcome = Outcome(mutant, status, seconds, failed, tail)
    if echo is not None and status == ERROR:
        echo(f"    (lastcall run exited {proc.returncode}: {tail.splitlines()[-1] if tail else 'no output'})")
    return outcome


def _stop(proc: subprocess.Popen[str]) -> str:
    """SIGTERM (lastcall run cleans up), then SIGKILL to the whole session; the output so far."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        out, _ = proc.communicate(timeout=TERM_GRACE_S)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, _ = proc.communicate()
    return out or ""
