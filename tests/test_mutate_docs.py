"""docs/mutation.md's measured table is what harness.mutate.table renders from docs/data/mutation.json, and
every survivor recorded there is explained (mutation/survivors.yaml or equivalent.yaml, under the id it has now
when its function moved: mutation/moved.txt); survivors.yaml explains only survivors of that measurement."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.mutate.plan import EQUIVALENT, SURVIVORS, read_entries, with_recorded_ids
from harness.mutate.table import BEGIN, DATA, END, FRESH, FRESH_BEGIN, FRESH_END, PAGE, markdown, render_doc

README = Path(__file__).resolve().parent.parent / "README.md"


def _recorded() -> dict:  # type: ignore[type-arg]
    if not DATA.exists():
        pytest.fail(f"{DATA} is missing: record a measurement with ./dev mutate --sample 60 --seed 1 --record")
    data: dict = json.loads(DATA.read_text())  # type: ignore[type-arg]
    return data


def test_the_table_is_rendered_from_its_data() -> None:
    text = PAGE.read_text()
    shown = text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip("\n")
    assert shown == markdown(_recorded()), "re-render: python -m harness.mutate.table"


def test_the_fresh_sample_is_rendered_from_its_data_and_is_whole() -> None:
    """A fresh sample of the code as it is, beside the recorded one: shown as it came, survivors unexplained."""
    fresh = json.loads(FRESH.read_text())
    text = PAGE.read_text()
    shown = text[text.index(FRESH_BEGIN) + len(FRESH_BEGIN):text.index(FRESH_END)].strip("\n")
    assert shown == markdown(fresh), "re-render: python -m harness.mutate.table"
    assert fresh["raw"]["all"] == len(fresh["mutants"]) == fresh["planned"] >= 60


def test_the_measurement_is_a_whole_seeded_sample_of_at_least_60() -> None:
    """At least 60 mutants, a fixed seed, every mutant drawn run (a run cut short fails here)."""
    data = _recorded()
    assert isinstance(data["seed"], int) and data["planned"] >= 60
    assert data["raw"]["all"] == len(data["mutants"]) == data["planned"], (
        f"cut short: {data['raw']['all']} of the {data['planned']} drawn were run; rerun ./dev mutate "
        f"--sample {data['planned']} --seed {data['seed']} --record")


def test_every_survivor_of_the_measurement_is_explained() -> None:
    data = _recorded()
    assert data["raw"]["all"] == len(data["mutants"]) and isinstance(data["seed"], int)
    assert data["raw"]["killed"] == sum(m["status"] != "survived" for m in data["mutants"])
    explained = set(with_recorded_ids({**read_entries(SURVIVORS, equivalent=False),
                                       **read_entries(EQUIVALENT, equivalent=True)}))
    missing = [m["id"] for m in data["mutants"] if m["status"] == "survived" and m["id"] not in explained]
    assert not missing, f"explain each in mutation/survivors.yaml (or show it equivalent): {missing}"
    survived = {m["id"] for m in data["mutants"] if m["status"] == "survived"}
    stale = sorted(set(read_entries(SURVIVORS, equivalent=False)) - survived)
    assert not stale, f"mutation/survivors.yaml explains mutants that are no survivor of the measurement: {stale}"
    assert "docs/mutation.md" in README.read_text()


def test_rendering_replaces_only_the_text_between_the_markers(tmp_path: Path) -> None:
    page, data = tmp_path / "p.md", tmp_path / "d.json"
    shutil.copy(DATA, data) if DATA.exists() else data.write_text(json.dumps(_sample()))
    page.write_text(f"before\n{BEGIN}\nstale table\n{END}\nafter\n")
    render_doc(data, page)
    text = page.read_text()
    assert text.startswith(f"before\n{BEGIN}\n") and text.endswith(f"\n{END}\nafter\n") and "stale table" not in text


def _sample() -> dict:  # type: ignore[type-arg]
    return {"command": "x", "commit": "c", "date": "d", "python": "3", "seed": 1, "mutants_in_scope": 2, "planned": 2,
            "raw": {"killed": 1, "all": 2}, "non_equivalent": {"killed": 1, "all": 2},
            "mutants": [{"id": "a:1:0:remove", "qualname": "f", "op": "remove", "about": "x", "status": "killed"},
                        {"id": "a:2:0:negate", "qualname": "f", "op": "negate", "about": "y", "status": "survived"}]}


def test_an_unexplained_survivor_is_shown_as_such() -> None:
    text = markdown(_sample(), explanations={})
    assert "| `a:2:0:negate` | `f` | y | **not explained** |" in text
    assert "| raw (killed / all) | 1 | 2 | 50.0 % |" in text


def test_parts_of_one_sample_merge_into_one_measurement() -> None:
    from harness.mutate.table import merge

    a, b = _sample(), _sample()
    a["planned"] = 3
    b["command"] = "./dev mutate --sample 60 --seed 1 --only a:3:0:remove --json /tmp/b.json"
    b["mutants"] = [{"id": "a:3:0:remove", "qualname": "f", "op": "remove", "about": "z", "status": "killed",
                     "equivalent": True}]
    m = merge([a, b])
    assert [x["id"] for x in m["mutants"]] == ["a:1:0:remove", "a:2:0:negate", "a:3:0:remove"]
    assert m["raw"] == {"killed": 2, "all": 3} and m["non_equivalent"] == {"killed": 1, "all": 2}
    assert m["planned"] == 3 and m["command"] == "x + ./dev mutate --sample 60 --seed 1 --json /tmp/b.json " \
                                                 "--only <1 ids of the sample>"


def test_a_later_part_replaces_an_earlier_result_only_with_later_wins() -> None:
    """The recorded measurement re-runs the earlier survivors on the grown library: their new outcome must
    replace the old one (in the order the mutants were drawn); the default keeps the first."""
    from harness.mutate.table import merge

    a, b = _sample(), _sample()
    b["command"] = "./dev mutate --sample 60 --seed 1 --only a:2:0:negate --json /tmp/b.json"
    b["mutants"] = [{"id": "a:2:0:negate", "qualname": "f", "op": "negate", "about": "y", "status": "killed",
                     "failed": ["s.yaml::s"]}]
    m = merge([a, b], later_wins=True)
    assert [(x["id"], x["status"]) for x in m["mutants"]] == [("a:1:0:remove", "killed"), ("a:2:0:negate", "killed")]
    assert m["raw"] == {"killed": 2, "all": 2} and m["non_equivalent"] == {"killed": 2, "all": 2}
    assert [x["status"] for x in merge([a, b])["mutants"]] == ["killed", "survived"]
    merged_before = "x + ./dev mutate --json /tmp/c.json --only <7 ids of the sample>"
    assert merge([{**a, "command": merged_before}, b])["command"] == (
        merged_before + " + ./dev mutate --sample 60 --seed 1 --json /tmp/b.json --only <1 ids of the sample>")
    a["unmutated_seconds"], b["unmutated_seconds"] = {"listener": 30.0, "cli": 5.0}, {"listener": 41.0}
    assert merge([a, b])["unmutated_seconds"] == {"listener": 30.0, "cli": 5.0}  # as its mutants: the first part's
    assert merge([a, b], later_wins=True)["unmutated_seconds"] == {"listener": 41.0, "cli": 5.0}
    m = merge([a], equivalent={"a:2:0:negate"})  # an equivalence shown after the run: the score follows it
    assert m["non_equivalent"] == {"killed": 1, "all": 1} and m["mutants"][1]["equivalent"] is True


@pytest.mark.parametrize(("argv", "says"), [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--later-wins"], "--later-wins goes with --merge"),
    (["--merge"], "--merge takes the RUN.json files"),
    (["run.json"], "RUN.json files go only with --merge"),
])
def test_a_bad_command_line_is_a_usage_error(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.mutate.table import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2 and says in capsys.readouterr().err


@pytest.mark.parametrize("content", [None, "{not json", '{"a": 1}', "[1, 2]"])
def test_a_run_file_that_is_no_run_is_refused_and_nothing_is_written(content: str | None, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from harness.mutate.table import main

    run = tmp_path / "run.json"
    if content is not None:
        run.write_text(content)
    before = DATA.read_bytes(), PAGE.read_bytes()
    assert main(["--merge", "--later-wins", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m harness.mutate.table: --merge: not runs of ./dev mutate --json") and \
        "Traceback" not in err
    assert (DATA.read_bytes(), PAGE.read_bytes()) == before
