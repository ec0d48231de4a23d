"""docs/cli.md, generated from the command line itself: the exit codes, then every command with its options.

``python -m harness.clidocs > docs/cli.md``; a test checks the committed page is current.  The exit codes are
the "Exit codes:" block of harness.cli's docstring (the one declaration, which ``lastcall --help`` prints as its
epilog too); the commands are read from :func:`harness.cli.build_parser` by walking argparse's parser objects
(their ``_actions``: argparse keeps no public list of them, and this module alone reads it).
"""

from __future__ import annotations

import argparse
import re

from harness import cli

__all__ = ["render_markdown", "exit_codes"]

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


_TAG = re.compile(r"<(?=[A-Za-z/!?])")  # what markdown would read as the start of an HTML tag


def _cell(text: str | None) -> str:
    """``text`` on one line for a table cell: a | escaped, and a < outside code (``backend.<cmd>``) shown, not
    read as an HTML tag."""
    text = " ".join((text or "").replace("``", "`").split()).replace("|", "\\|")
    parts = text.split("`")
    return "`".join(_TAG.sub("&lt;", p) if i % 2 == 0 else p for i, p in enumerate(parts))


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
    return _cell(text + (f" ({', '.join(notes)})" if notes and not any(n in text for n in notes) else ""))


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
    out = [f"{'#' * depth} `{path}`", "", _cell(command.description or about), "", f"Usage: `{usage}`", ""]
    options = _options(command)
    if options:
        out += [*options, ""]
    if command.epilog:
        out += [_cell(command.epilog[0].upper() + command.epilog[1:]) + ".", ""]
    for name, sub_about, sub in _subcommands(command):
        out += _command(f"{path} {name}", sub_about, sub, depth + 1)
    return out


def render_markdown() -> str:
    """docs/cli.md: the exit codes, the commands in one table, then each command with its options."""
    command = cli.build_parser()
    commands = _subcommands(command)
    out = ["# Command line", "",
           "<!-- generated by `python -m harness.clidocs > docs/cli.md`; a test checks it is current -->", "",
           _cell(command.description), "Every command also takes `-h`/`--help`; `lastcall --version` prints the "
           "version.", "",
           "## Exit codes", "", "| code | meaning |", "|---|---|",
           *(f"| {code} | {_cell(meaning)} |" for code, meaning in exit_codes()), "",
           "## Commands", "", "| command | what |", "|---|---|",
           *(f"| [`{name}`](#lastcall-{name}) | {_cell(about)} |" for name, about, _ in commands), ""]
    for name, about, sub in commands:
        out += _command(f"lastcall {name}", about, sub, 2)
    return "\n".join(out).rstrip("\n") + "\n"


if __name__ == "__main__":  # python -m harness.clidocs > docs/cli.md
    print(render_markdown(), end="")
