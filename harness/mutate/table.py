"""docs/mutation.md's measured figures, rendered from docs/data/mutation.json (``./dev mutate --record``).

``python -m harness.mutate.table`` re-renders the page's part between the markers from the JSON (after an
explanation in mutation/survivors.yaml or equivalent.yaml changed: the JSON keeps the outcomes, the YAML
files the explanations); tests/test_mutate_docs.py renders it and compares.  ``python -m harness.mutate.table
--merge [--later-wins] A.json B.json ...`` writes the merge of runs of parts of one sample to the JSON first
(:func:`merge`; with ``--later-wins`` a mutant run again in a later part takes that part's outcome; which
mutants are equivalent is read from mutation/equivalent.yaml as it is then).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from harness import provenance

__all__ = ["DATA", "PAGE", "BEGIN", "END", "FRESH", "FRESH_BEGIN", "FRESH_END", "markdown", "render_doc"]

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "data" / "mutation.json"
PAGE = ROOT / "docs" / "mutation.md"
BEGIN, END = "<!-- mutation-table:begin -->", "<!-- mutation-table:end -->"
# a fresh sample of the code as it is, beside the recorded one: ./dev mutate --sample 60 --seed 1
# --workers 2 --json docs/data/mutation_fresh.json; its survivors are shown as they are, explained or not
FRESH = ROOT / "docs" / "data" / "mutation_fresh.json"
FRESH_BEGIN, FRESH_END = "<!-- mutation-fresh-table:begin -->", "<!-- mutation-fresh-table:end -->"


def _pct(k: int, n: int) -> str:
    return f"{100 * k / n:.1f} %" if n else "n/a"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(data: dict[str, Any], explanations: dict[str, str] | None = None) -> str:
    """The figures, the outcome counts by operator, and every survivor with its explanation."""
    from harness.mutate.plan import EQUIVALENT, SURVIVORS, read_entries, with_recorded_ids

    if explanations is None:
        explanations = {k: e.why for k, e in read_entries(SURVIVORS, equivalent=False).items()}
        explanations.update({k: f"equivalent ({e.reason}, shown by `{e.test}`): {e.why}"
                             for k, e in read_entries(EQUIVALENT, equivalent=True).items()})
        explanations = with_recorded_ids(explanations)  # a record names a moved function as it was then
    raw, ne = data["raw"], data["non_equivalent"]
    mutants = data["mutants"]
    lines = [f"Measured with `{data['command']}` at commit {data['commit']} ({data['date']}, Python "
             f"{data['python']}): a sample of **{raw['all']}** of the {data['mutants_in_scope']} mutants of "
             f"mutation/stop-path.txt, seed **{data['seed']}**"
             + (f" (cut short: {raw['all']} of the {data['planned']} drawn were run)."
                if data.get("planned", raw["all"]) != raw["all"] else "."),
             "",
             "| score | killed | of | % |",
             "|---|---:|---:|---:|",
             f"| raw (killed / all) | {raw['killed']} | {raw['all']} | {_pct(raw['killed'], raw['all'])} |",
             f"| non-equivalent | {ne['killed']} | {ne['all']} | {_pct(ne['killed'], ne['all'])} |",
             "",
             "| operator | run | killed by a scenario | by timeout | by an error | survived |",
             "|---|---:|---:|---:|---:|---:|"]
    for op in sorted({m["op"].rstrip("0123456789") for m in mutants}):
        mine = [m for m in mutants if m["op"].rstrip("0123456789") == op]
        counts = [sum(1 for m in mine if m["status"] == s) for s in
                  ("killed", "killed by timeout", "killed by an error", "survived")]
        lines.append(f"| {op} | {len(mine)} | " + " | ".join(map(str, counts)) + " |")
    flaky = set(data.get("flaky_on_unmutated", []))
    doubtful = [m for m in mutants if m["status"] == "killed" and m.get("rerun") and m.get("failed")
                and m["failed"][0] in flaky]
    if flaky:
        lines += ["", "Seen FLAKY in this run (failed once, then passed on the same code): "
                  + ", ".join(f"`{f}`" for f in sorted(flaky)) + "."]
    if doubtful:
        k_strict = ne["killed"] - sum(1 for m in doubtful if not m.get("equivalent"))
        lines += [f"Killed only by such an item ({len(doubtful)}, counted as killed above: it failed in two whole "
                  "runs on the mutant and passed alone on it in between): "
                  + ", ".join(f"`{m['id']}`" for m in doubtful)
                  + f". Counted as survivors instead, the non-equivalent score is {k_strict}/{ne['all']} "
                  f"({_pct(k_strict, ne['all'])})."]
    survivors = [m for m in mutants if m["status"] == "survived"]
    lines += ["", f"Survivors ({len(survivors)}), each with its explanation (mutation/survivors.yaml, "
                  "mutation/equivalent.yaml):", ""]
    if survivors:
        lines += ["| mutant | function | mutation | explanation |", "|---|---|---|---|"]
        for m in survivors:
            why = explanations.get(m["id"], "**not explained**")
            lines.append(f"| `{m['id']}` | `{m['qualname']}` | {_cell(m['about'])} | {_cell(why)} |")
    else:
        lines.append("none.")
    return "\n".join([*lines, "", provenance.line(provenance.records_of(data))])


def _short_command(command: str) -> str:
    """A command line with its --only ids counted, not listed (a merged one's parts each shortened, once)."""
    if " + " in command:
        return " + ".join(_short_command(part) for part in command.split(" + "))
    if "ids of the sample>" in command:
        return command  # already shortened
    words = command.split()
    ids = [w for i, w in enumerate(words) if i and words[i - 1] == "--only"]
    rest = [w for i, w in enumerate(words) if w != "--only" and not (i and words[i - 1] == "--only")]
    return " ".join(rest) + (f" --only <{len(ids)} ids of the sample>" if ids else "")


def merge(parts: list[dict[str, Any]], later_wins: bool = False,
          equivalent: set[str] | None = None) -> dict[str, Any]:
    """One measurement from the JSON of runs of parts of one sample (``--only`` the ids of each part, the
    same code): the mutants of all, the first run's sample, seed and number planned, the scores recomputed.

    A mutant in several parts keeps its first result; with ``later_wins`` its last (a re-run of the earlier
    survivors on a grown library replaces their earlier outcome), in the order the mutants first appeared.  A
    group's unmutated time follows the same rule (each part timed its own unmutated run of a group: the merge
    had kept the last part's, with or without ``later_wins``).
    ``equivalent``: the ids mutation/equivalent.yaml shows equivalent now (an entry may be newer than a part's
    run): each mutant's ``equivalent`` flag is set from it, and the non-equivalent score with it."""
    first = parts[0]
    seen: dict[str, dict[str, Any]] = {}
    unmutated: dict[str, float] = {}
    put: Any = dict.__setitem__ if later_wins else dict.setdefault  # a later part replaces, or the first stays
    for part in parts:
        for m in part["mutants"]:
            put(seen, m["id"], m)
        for group, seconds in part.get("unmutated_seconds", {}).items():
            put(unmutated, group, seconds)
    mutants = list(seen.values())
    if equivalent is not None:
        mutants = [{**m, "equivalent": m["id"] in equivalent} for m in mutants]
    ne = [m for m in mutants if not m.get("equivalent")]
    return {**first, "command": " + ".join(_short_command(p["command"]) for p in parts),
            "commit": ", ".join(dict.fromkeys(p["commit"] for p in parts)),
            "unmutated_seconds": unmutated,
            "flaky_on_unmutated": list(dict.fromkeys(f for p in parts for f in p.get("flaky_on_unmutated", []))),
            "raw": {"killed": sum(m["status"] != "survived" for m in mutants), "all": len(mutants)},
            "non_equivalent": {"killed": sum(m["status"] != "survived" for m in ne), "all": len(ne)},
            "mutants": mutants}


def render_doc(data_path: Path = DATA, page: Path = PAGE, fresh: Path = FRESH) -> None:
    """Write the table into ``page`` between the markers (the rest of the page is left as it is), and the fresh
    sample's between its own where the page has them."""
    text = page.read_text()
    for path, begin, end in ((data_path, BEGIN, END), (fresh, FRESH_BEGIN, FRESH_END)):
        if begin not in text or not path.exists():
            continue
        start, stop = text.index(begin) + len(begin), text.index(end)
        text = text[:start] + "\n" + markdown(json.loads(path.read_text())) + "\n" + text[stop:]
    page.write_text(text)


def main(argv: list[str]) -> int:
    """``python -m harness.mutate.table`` re-renders docs/mutation.md's tables; ``--merge [--later-wins]
    RUN.json...`` first writes the merge of those runs to docs/data/mutation.json.  Bad input (an unknown
    option, a run file that cannot be read or is not a run) is one line on stderr and exit 2, nothing written."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m harness.mutate.table",
                                 description="Re-render docs/mutation.md's measured tables from docs/data/.")
    ap.add_argument("--merge", action="store_true",
                    help="first write the merge of the RUN files (parts of one sample) to docs/data/mutation.json")
    ap.add_argument("--later-wins", action="store_true",
                    help="with --merge: a mutant run again in a later part takes that part's outcome")
    ap.add_argument("runs", nargs="*", metavar="RUN.json", help="with --merge: the runs, in order")
    args = ap.parse_args(argv)
    if args.merge != bool(args.runs):
        ap.error("--merge takes the RUN.json files to merge, and RUN.json files go only with --merge")
    if args.later_wins and not args.merge:
        ap.error("--later-wins goes with --merge")
    if args.merge:
        from harness.mutate.plan import EQUIVALENT, read_entries, with_recorded_ids

        try:
            runs = [json.loads(Path(f).read_text()) for f in args.runs]
            equivalent = set(with_recorded_ids(read_entries(EQUIVALENT, equivalent=True)))
            merged = merge(runs, later_wins=args.later_wins, equivalent=equivalent)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            print(f"{ap.prog}: --merge: not runs of ./dev mutate --json ({type(exc).__name__}: {exc})", file=sys.stderr)
            return 2
        DATA.write_text(json.dumps(merged, indent=1) + "\n")
    render_doc()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
