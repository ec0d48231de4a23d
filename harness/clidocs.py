"""docs/cli.md, generated from the command line itself: the exit codes, then every command with its options.

``python -m harness.clidocs > docs/cli.md``; a test checks the committed page is current.  The exit codes are
the "Exit codes:" block of harness.cli's docstring (the one declaration, which ``lastcall --help`` prints as its
epilog too); the commands are read from :func:`harness.cli.build_parser` by walking argparse's parser objects
(their ``_actions``: argparse keeps no public list of them, and this module alone reads it).

``python -m harness.clidocs --help-fixtures`` writes fixtures/help/: what ``lastcall --help`` and each
(sub)command's ``--help`` print, one file per command, at a fixed width (argparse wraps to $COLUMNS), so that
a change to any help text is seen in review; a test checks the committed files are current.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
from pathlib import Path

from harness import cli
from harness.markdown import cell

__all__ = ["render_markdown", "exit_codes", "command_paths", "help_output", "help_fixtures", "write_help_fixtures",
           "HELP_DIR", "HELP_COLUMNS"]

HELP_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "help"  # the committed --help texts
HELP_COLUMNS = 100  # the terminal width the --help texts are written at: argparse wraps to $COLUMNS

_CODE = re.compile(r"^  (\d+)\s+(.*)$")  # a code's first line in the block: two spaces, the code, its meaning


def exit_codes() -> list[tuple[int, str]]:
    """(code, meaning) for each code of harness.cli's "Exit codes:" block, in its order."""
    block = (cli.__doc__ or "").split("Exit codes:", 1)[1]
    out: list[tuple[int, str]] = []
    for line in block.strip("\n").splitlines():
        first = _CODE.match(line)
        if first:
            out.append((int(first.group(1)), first.group(2).strip()))
        elif line.strip() and out:
            out[-1] = (out[-1][0], f"{out[-1][1]} {line.strip()}")
    return out


def _subcommands(command: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, command) of each subcommand of ``command``, in the order they were added."""
    for action in command._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return []


def _metavar(action: argparse.Action) -> str:
    if action.nargs == 0:
        return "-"
    if action.metavar is not None:
        return f"`{action.metavar}`"
    if action.choices is not None:
        return "`{" + ",".join(str(c) for c in action.choices) + "}`"
    return f"`{action.dest.upper() if action.option_strings else action.dest}`"


def _default(action: argparse.Action) -> str:
    value = action.default
    if value is None or value is argparse.SUPPRESS or value is False or value == []:
        return "-"
    return f"`{value}`"


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if "%(" in text:
        text = text % {"default": action.default, "dest": action.dest}
    notes = [n for n, on in (("required", action.required and bool(action.option_strings)),
                             ("repeatable", isinstance(action, argparse._AppendAction))) if on]
    return cell(text + (f" ({', '.join(notes)})" if notes and not any(n in text for n in notes) else ""))


def _options(command: argparse.ArgumentParser) -> list[str]:
    rows = ["| option | value | default | what |", "|---|---|---|---|"]
    for action in command._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        names = ", ".join(f"`{o}`" for o in action.option_strings) or _metavar(action)
        value = _metavar(action) if action.option_strings else f"positional{_nargs(action)}"
        rows.append(f"| {names} | {value} | {_default(action)} | {_help(action)} |")
    return rows if len(rows) > 2 else []


def _nargs(action: argparse.Action) -> str:
    return {"+": ", one or more", "*": ", any number", "?": ", optional"}.get(str(action.nargs), "")


def _usage(command: argparse.ArgumentParser) -> str:
    """The usage line as argparse writes it, on one line whatever the terminal's width."""
    formatter = argparse.HelpFormatter(command.prog, width=10_000)
    formatter.add_usage(command.usage, command._actions, command._mutually_exclusive_groups, prefix="")
    return " ".join(formatter.format_help().split())


def _command(path: str, about: str, command: argparse.ArgumentParser, depth: int) -> list[str]:
    usage = _usage(command)
    out = [f"{'#' * depth} `{path}`", "", cell(command.description or about), "", f"Usage: `{usage}`", ""]
    options = _options(command)
    if options:
        out += [*options, ""]
    if command.epilog:
        out += [cell(command.epilog[0].upper() + command.epilog[1:]) + ".", ""]
    for name, sub_about, sub in _subcommands(command):
        out += _command(f"{path} {name}", sub_about, sub, depth + 1)
    return out


def render_markdown() -> str:
    """docs/cli.md: the exit codes, the commands in one table, then each command with its options."""
    command = cli.build_parser()
    commands = _subcommands(command)
    out = ["# Command line", "",
           "<!-- generated by `python -m harness.clidocs > docs/cli.md`; a test checks it is current -->", "",
           cell(command.description), "Every command also takes `-h`/`--help`; `lastcall --version` prints the "
           "version.", "",
           "## Exit codes", "", "| code | meaning |", "|---|---|",
           *(f"| {code} | {cell(meaning)} |" for code, meaning in exit_codes()), "",
           "## Commands", "", "| command | what |", "|---|---|",
           *(f"| [`{name}`](#lastcall-{name}) | {cell(about)} |" for name, about, _ in commands), ""]
    for name, about, sub in commands:
        out += _command(f"lastcall {name}", about, sub, 2)
    return "\n".join(out).rstrip("\n") + "\n"


def command_paths() -> list[list[str]]:
    """Every command's words after ``lastcall``, read from the parser: [] (lastcall itself), then each
    subcommand, each followed by its own subcommands."""
    def walk(path: list[str], command: argparse.ArgumentParser) -> list[list[str]]:
        out = [path]
        for name, _, sub in _subcommands(command):
            out += walk([*path, name], sub)
        return out

    return walk([], cli.build_parser())


def help_file(path: list[str]) -> str:
    """The fixture's file name of a command: lastcall.txt, contract.txt, ctl.list.txt."""
    return f"{'.'.join(path) or 'lastcall'}.txt"


def help_output(path: list[str]) -> str:
    """What ``lastcall PATH... --help`` prints through harness.cli.main, at HELP_COLUMNS columns."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(HELP_COLUMNS)
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            cli.main([*path, "--help"])
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
    return buf.getvalue()


def help_fixtures() -> dict[str, str]:
    """file name -> --help text, for every command of the parser."""
    return {help_file(path): help_output(path) for path in command_paths()}


def write_help_fixtures(folder: Path = HELP_DIR) -> None:
    """Write every command's --help text into ``folder`` and remove the files no command has any more."""
    folder.mkdir(parents=True, exist_ok=True)
    texts = help_fixtures()
    for name, text in texts.items():
        (folder / name).write_text(text)
    for old in folder.glob("*.txt"):
        if old.name not in texts:
            old.unlink()


if __name__ == "__main__":  # python -m harness.clidocs > docs/cli.md; --help-fixtures: fixtures/help/
    if sys.argv[1:] == ["--help-fixtures"]:
        write_help_fixtures()
    elif sys.argv[1:]:
        sys.exit("usage: python -m harness.clidocs [--help-fixtures]")
    else:
        print(render_markdown(), end="")
