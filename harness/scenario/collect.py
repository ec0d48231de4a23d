"""pytest collection of scenario YAML: one item per matrix point, plus one per planted bug it catches.

* Files are collected under the roots named by the ``lastcall_scenarios`` ini
  option (``scenarios`` here; a user's project declares its own) and any YAML
  file named on the command line.  fixtures/bad-scenarios/ is never under a root.
* A file that does not load, or whose ``target:`` does not import, becomes one
  failing item carrying the located error; the session goes on.  An override that
  names no target is a pytest.UsageError at configure time (exit 4), before collection.
* ``name[tp2-pp1-cpu]`` runs the scenario on its target (``--lastcall-target`` or
  LASTCALL_TARGET override); ``name[tp1-pp1-cpu-catches-BUG]`` runs its first
  matrix point on each planted bug named in ``catches`` (under a target that declares
  ``variants``, the target's variant of that name; one it lacks is skipped with the
  reason) and passes only if one of the bug's checkers reports a violation on a run
  that counts (harness.scenario.catches): a scenario that cannot fail is not a test.
* Marks from the YAML apply (``-m slow``); matrix points with device cuda are
  marked ``gpu`` and skipped with the reason where CUDA is missing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness import envvars
from harness.errors import ConfigError
from harness.scenario.errors import ScenarioError
from harness.scenario.repeat import repeats

if TYPE_CHECKING:
    from harness.scenario.loader import MatrixItem

INI_ROOTS = "lastcall_scenarios"


TARGET_OPTION = "--lastcall-target"
LISTENER_OPTION = "--lastcall-listener"
# the short forms of one release ago: still read, with a DeprecationWarning (option -> (its dest, the new name))
DEPRECATED = {"--target": ("lastcall_target_alias", TARGET_OPTION),
              "--listener": ("lastcall_listener_alias", LISTENER_OPTION)}


def addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lastcall")
    group.addoption(TARGET_OPTION, dest="lastcall_target", default=None, metavar="TARGET",
                    help="run scenarios against this target or variant (a name such as reference or "
                    "no_conn_tracking, or module:attribute); default: each scenario's own, or LASTCALL_TARGET")
    group.addoption(LISTENER_OPTION, dest="lastcall_listener", default=None, metavar="MODULE:ATTR",
                    help="run the reference target with this listener class/factory instead of its own "
                    f"(same as {TARGET_OPTION} reference@MODULE:ATTR); default: LASTCALL_LISTENER")
    for old, (dest, new) in DEPRECATED.items():
        group.addoption(old, dest=dest, default=None, help=f"deprecated alias of {new}")
    parser.addini(INI_ROOTS, type="paths", default=[], help="directories whose *.yaml files are lastcall scenarios")
    from harness.report.summary import addoption as add_report_options

    add_report_options(parser)


def _roots(config: pytest.Config) -> list[Path]:
    roots = config.getini(INI_ROOTS) or []
    return [Path(r).resolve() for r in roots]


def _given(config: pytest.Config) -> set[Path]:
    out = set()
    for arg in config.args:
        p = Path(arg.split("::")[0])
        if p.suffix in (".yaml", ".yml"):
            out.add(p.resolve())
    return out


def collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix not in (".yaml", ".yml"):
        return None
    path = file_path.resolve()
    config = parent.config
    if path in _given(config) or any(r == path or r in path.parents for r in _roots(config)):
        return ScenarioFile.from_parent(parent, path=file_path)
    return None


def configure(config: pytest.Config) -> None:
    """Warn of a deprecated option; load the session's target override: pytest.UsageError if it is none."""
    if not hasattr(config, "workerinput"):  # the controller warns once, not each xdist worker again
        for old, (dest, new) in DEPRECATED.items():
            if config.getoption(dest, None) is not None:
                config.issue_config_time_warning(DeprecationWarning(
                    f"lastcall: {old} is deprecated and goes in the next release; use {new}"), stacklevel=2)
    target = chosen_target(config)
    if target is not None:
        from harness.targets import load_target

        given = (TARGET_OPTION if _option(config, "target") else "LASTCALL_TARGET" if envvars.text(
            "LASTCALL_TARGET") else LISTENER_OPTION if _option(config, "listener") else "LASTCALL_LISTENER")
        try:
            load_target(target)  # imported here, before anything is collected or started
        except ConfigError as exc:
            raise pytest.UsageError(f"{given}: {exc}") from None


def _option(config: pytest.Config, name: str) -> str | None:
    """--lastcall-NAME, else its deprecated short form --NAME."""
    value = config.getoption(f"lastcall_{name}", None) or config.getoption(f"lastcall_{name}_alias", None)
    return str(value) if value else None


def chosen_target(config: pytest.Config) -> str | None:
    """The target override of this session (--lastcall-target, LASTCALL_TARGET), with --lastcall-listener applied."""
    target = _option(config, "target") or envvars.text("LASTCALL_TARGET")
    listener = _option(config, "listener") or envvars.text("LASTCALL_LISTENER")
    if listener:
        target = f"{(target or 'reference').partition('@')[0]}@{listener}"
    return target


def _cuda_devices() -> int:
    # No device node, no CUDA (nor ROCm) device: answered without importing torch (seconds, and most of a
    # second more at the interpreter's exit) in a process that may never need it.
    if not (os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/kfd")):
        return 0
    try:
        import torch

        return int(torch.cuda.device_count())
    except Exception:
        return 0


class ScenarioFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        from harness.scenario.loader import expand, load  # the loader, once a scenario file is collected
        from harness.targets import load_target

        try:
            # named as the user would type it from here; opened from here too (pytest's rootdir may be
            # elsewhere: `lastcall run /other/dir/x.yaml` roots the session at /other/dir)
            rel = os.path.relpath(self.path)
            scn = load(rel if not rel.startswith("..") else str(self.path))
        except ScenarioError as exc:
            yield BrokenScenario.from_parent(self, name=self.path.stem, error=str(exc))
            return
        override = chosen_target(self.config)
        if override is None:
            try:
                load_target(scn.target)  # imported here, in the harness process, before anything starts
            except ConfigError as exc:
                yield BrokenScenario.from_parent(self, name=self.path.stem, error=f"{scn.where('target')}: target: "
                                                 f"{exc}")
                return
        items = expand(scn)
        n = repeats(self.config)
        suffixes = [""] if n == 1 else [f"-r{i}" for i in range(1, n + 1)]
        for item in items:
            for sfx in suffixes:
                yield self._item(item, item.id + sfx, override)
        for bug, spec, why in _catch_runs(scn, override):
            for sfx in suffixes:
                it = self._item(items[0], f"{items[0].id}-catches-{bug}{sfx}", spec or bug,
                                catch=(bug, scn.catch_checkers(bug)))
                if spec is None:
                    it.add_marker(pytest.mark.skip(reason=why))
                elif (unjudged := _unjudgeable(scn, spec, scn.catch_checkers(bug))) is not None:
                    it.add_marker(pytest.mark.skip(reason=f"target {spec} cannot show {bug} caught: {unjudged}"))
                yield it

    def _item(self, item: MatrixItem, ident: str, variant: str | None, *,
              catch: tuple[str, tuple[str, ...]] | None = None) -> ScenarioItem:
        it = ScenarioItem.from_parent(self, name=f"{item.scenario.name}[{ident}]", matrix=item, variant=variant,
                                      catch=catch)
        for mark in item.scenario.marks:
            it.add_marker(getattr(pytest.mark, mark))
        if item.params["device"] == "cuda":
            it.add_marker(pytest.mark.gpu)
            have = _cuda_devices()
            need = item.params["tp"] * item.params["pp"]
            if have < need:
                it.add_marker(pytest.mark.skip(reason=f"needs {need} CUDA device(s), this machine has {have}"))
        missing, why_not = _missing(item.scenario, variant)
        name = variant or item.scenario.target
        if missing:  # lacking by design is a skip; failing a guarantee it claims is a violation
            it.add_marker(pytest.mark.skip(reason=f"target {name} lacks by design: " + ", ".join(missing)))
        elif why_not:
            it.add_marker(pytest.mark.skip(reason=f"target {name} cannot run here: {why_not}"))
        return it


def _catch_runs(scn: Any, override: str | None) -> list[tuple[str, str | None, str]]:
    """(bug, the target spec it runs as or None, why not) for each planted bug of ``catches``: under a target
    that declares ``variants`` (the override, else the scenario's own) the bug's name resolves to its variant
    of that name (harness.scenario.catches.resolve); an override that declares none runs only the catches that
    name a target spec of their own (``module:attribute``)."""
    from harness.scenario.catches import declared_variants, is_spec, resolve
    from harness.targets import load_target

    try:
        target = load_target(override or scn.target)
    except ConfigError:
        target = None  # (an override is loaded at configure; the scenario's own just above)
    names = scn.catch_names()
    if override is not None and declared_variants(target) is None:
        # the override is not what the named planted bugs are variants of; a module:attribute names its own
        names = [bug for bug in names if is_spec(bug)]
    return [(bug, *resolve(target, bug)) for bug in names]


def _unjudgeable(scn: Any, spec: str, checkers: tuple[str, ...]) -> str | None:
    """Why no checker of ``checkers`` can be judged on the target ``spec`` (each needs the events of a party
    the target declares absent, so each would be not_judged), or None when one can."""
    from harness.checkers import CHECKERS
    from harness.events import PARTY_CAPABILITIES, absent_parties
    from harness.targets import capabilities_of, load_target

    try:
        absent = absent_parties(capabilities_of(load_target(spec)))
    except ConfigError:
        return None  # the run says why it cannot start
    params = {e.checker: e.params for e in scn.expect}
    needs: dict[str, list[str]] = {}
    for name in checkers:
        chk = CHECKERS.get(name)
        if chk is None:
            return None
        gone = [p for p in chk.evidence_for(params.get(name, chk.params.model_construct())) if p in absent]
        if not gone:
            return None
        needs[name] = gone
    return "; ".join(f"{name} needs {' and '.join(gone)} events, which it declares absent (no "
                     f"{', '.join(PARTY_CAPABILITIES[p] for p in gone)})" for name, gone in needs.items())


def _missing(scenario: Any, variant: str | None) -> tuple[list[str], str | None]:
    """What the target lacks by design for this scenario, and why it cannot run on this machine (or None)."""
    from harness.scenario.needs import step_needs
    from harness.targets import load_target, missing_for, unavailable

    try:
        target = load_target(variant or scenario.target)
    except Exception:
        return [], None  # an unloadable target fails in the run, with its error
    return missing_for(target, step_needs(scenario.steps)), unavailable(target)


class BrokenScenario(pytest.Item):
    """A scenario file that does not load: fails with its located error, nothing else."""

    def __init__(self, *, error: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.error = error

    def runtest(self) -> None:
        raise ScenarioFailed(self.error)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        return str(excinfo.value)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"scenario file {self.name}"


class ScenarioFailed(Exception):
    """A scenario run failed; the message is the report pytest prints."""


def _skip_if_host_too_slow(result: Any, checkers: Any = None) -> None:
    """Skip the item, with the measured reason, when a checker it rests on (``checkers``, else any) could not be
    judged on a machine this slow (harness.checkers.modes.HOST_TOO_SLOW): neither a pass nor a failure."""
    from harness.checkers.modes import HOST_TOO_SLOW

    slow = [v for v in result.verdicts if v.status == "not_judged" and v.message.startswith(HOST_TOO_SLOW)
            and (checkers is None or v.checker in checkers)]
    if slow:
        pytest.skip("; ".join(f"{v.checker}: {v.message}" for v in slow))


class ScenarioItem(pytest.Item):
    def __init__(self, *, matrix: MatrixItem, variant: str | None, catch: tuple[str, tuple[str, ...]] | None,
                 **kw: Any) -> None:
        super().__init__(**kw)
        self.matrix = matrix
        self.variant = variant
        self.catch = catch  # (the planted bug, the checkers one of which must fire), on a catches item
        self.result: Any = None
        self.chain: Any = None  # its chained run (--lastcall-chain: harness.scenario.chain_items), if any

    @property
    def expect_violation(self) -> bool:
        return self.catch is not None

    def runtest(self) -> None:
        from harness.scenario.report import failure_text
        from harness.scenario.runner import run_item

        result = (self.chain.result(self) if self.chain is not None
                  else run_item(self.matrix, variant=self.variant, run_id=None))
        self.result = result
        self.stash_result(result)
        verdict, catch_doc = None, None
        if self.catch is not None:  # judged before the page is written: the page says why the item passed
            from harness.scenario.catches import judge_catch

            verdict = judge_catch(result, self.catch[1])
            catch_doc = verdict.to_dict(*self.catch)
        page = self.write_report(result, catch_doc)
        replay = self.replay_target()
        if self.catch is not None and verdict is not None:
            bug, checkers = self.catch
            self.user_properties.append(("lastcall_catch", verdict.why))
            if not verdict.counted:
                _skip_if_host_too_slow(result, checkers)
                on = "" if self.variant == bug else f" (as {self.variant})"
                raise ScenarioFailed(
                    f"{self.matrix.scenario.name} did not catch {bug}{on}: {verdict.why} (a scenario that cannot "
                    f"fail is not a test)\n" + failure_text(result, self.nodeid, page, replay))
            return
        if not result.passed:
            raise ScenarioFailed(failure_text(result, self.nodeid, page, replay))
        _skip_if_host_too_slow(result)

    def stash_result(self, result: Any) -> None:
        self.user_properties.append(("lastcall_run_id", result.run_id))
        self.user_properties.append(("lastcall_variant", result.variant))

    def replay_target(self) -> str | None:
        """The target a replay of this item needs besides its node id: the session's override (which a catches
        item resolves its bug against too), unless it is the scenario's own target."""
        override = chosen_target(self.config)
        return override if override not in (None, self.matrix.scenario.target) else None

    def write_report(self, result: Any, catch: dict[str, Any] | None = None) -> Path | None:
        """reports/<run id>/ for this run (None when reports are off; ``catch``: a catches item's judgement);
        never raises."""
        from harness.report.summary import reports_dir
        from harness.report.write import write_run

        where = reports_dir(self.config)
        page = None if where is None else write_run(result, where, self.nodeid, self.replay_target(), catch)
        if page is not None:
            self.user_properties.append(("lastcall_report", str(page)))
        return page

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ScenarioFailed):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"scenario {self.name}"
