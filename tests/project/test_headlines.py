"""README's and RESULTS.md's headline figures are the result files' own, written by benchmarks/headlines.py."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

harness = pytest.importorskip("harness")
headlines = pytest.importorskip("headlines")


def test_the_readme_and_results_headlines_are_what_the_json_gives():
    """A figure edited by hand, or a result file changed without running the script, fails here."""
    assert headlines.main(["--check"]) == 0, "run python benchmarks/headlines.py"


@pytest.fixture
def results(tmp_path, monkeypatch):
    """A copy of the result files the headlines read, to change."""
    folder = tmp_path / "results"
    folder.mkdir()
    for name in ("scenarios.json", "h200-time-to-quality.json", "cpu-time-to-quality.json"):
        shutil.copy(harness.RESULTS_DIR / name, folder / name)
    monkeypatch.setattr(harness, "RESULTS_DIR", folder)
    return folder


def _edit(path, change):
    rows = json.loads(path.read_text())
    for r in rows:
        change(r)
    path.write_text(json.dumps(rows))


def test_a_ratio_is_a_gain_only_when_every_round_beats_the_peer(results):
    h200 = headlines.render().split("A 2-core CPU")[0]
    assert "Within the noise, so no gain is claimed: DALI's usual settings (21,464-23,786)" in h200
    assert "**7.5×** `num_workers` = cores with pinning" in h200

    def lucky(r):  # the same medians, but the tuned config's worst round now above every round of DALI's usual start
        if r["scenario"] == "1xH200-loader" and r["machine"] == "1 x H200, 16 cores" and r["peer"] == "tuned":
            r["scores"] = [27125.3, 26000.0]

    _edit(results / "scenarios.json", lucky)
    h200 = headlines.render().split("A 2-core CPU")[0]
    assert "**1.2×** DALI's usual settings (21,464-23,786)" in h200 and "Within the noise" not in h200


def test_the_winner_is_called_a_start_or_a_sampled_config_by_autotune_s_own_starting_points(results):
    assert "**a built-in starting point** (the hardware-decoder DALI start)" in headlines.render()
    assert "2 of them chose a built-in starting point, 3 a config the search sampled" in headlines.render()

    def sampled(r):
        if r["method"] == "autotune":
            r["config"] = "dali-gpu b=512 threads=5 queue=3 hw_load=0.75"

    _edit(results / "h200-time-to-quality.json", sampled)
    assert "a config **the search sampled**, not one of the built-in starting points" in headlines.render()

    def recorded(r):  # the run's YAML said what found it: that, not today's starting points, is what is told
        if r["method"] == "autotune":
            r["winner_from"] = "dali-heuristic"

    _edit(results / "h200-time-to-quality.json", recorded)
    assert "**a built-in starting point** (DALI's usual start)" in headlines.render()


def test_one_reading_is_no_gain_and_a_grid_best_below_every_round_is_said_so(results):
    def single(r):
        if r["scenario"] == "1xH200-loader" and r["machine"] == "1 x H200, 16 cores" and r["peer"] == "torch defaults":
            r["scores"] = [332.5]
        if r["scenario"] == "1xH200-loader" and r["machine"] == "1 x H200, 16 cores" and r["peer"] == "tuned":
            r["scores"] = [29000.0, 30000.0]

    _edit(results / "scenarios.json", single)
    h200 = headlines.render().split("A 2-core CPU")[0]
    assert "the `DataLoader` defaults (332; one reading, too few to judge)" in h200
    assert "are all above the grid's best" in h200 and "all under" not in h200


def test_a_stale_block_is_found_and_rewritten(results, tmp_path, monkeypatch):
    readme, report = tmp_path / "README.md", tmp_path / "RESULTS.md"
    for path in (readme, report):
        path.write_text(f"intro\n{headlines.BEGIN}\n- **old:** 99× faster\n{headlines.END}\nrest\n")
    monkeypatch.setattr(headlines, "README", readme)
    monkeypatch.setattr(harness, "RESULTS", report)
    assert headlines.main(["--check"]) == 1
    assert headlines.main([]) == 0 and headlines.main(["--check"]) == 0
    text = readme.read_text()
    assert "99×" not in text and text.startswith("intro\n") and text.endswith("rest\n") and "81.6×" in text


def test_the_search_line_names_what_each_run_measured_and_calls_a_shortfall_only_beyond_noise():
    row = {"seed": 1, "configs_measured": 11, "sampled_measured": 8, "winner_is_start": False, "fraction": 0.92, "grid_size": 51, "rounds": 3,
           "grid_best_rate": 1321.5, "grid_best": "dali-cpu b=256", "run_id": "r2", "commit": "abc",
           "winner_rounds": [1217.0, 1413.0, 1068.0], "grid_best_rounds": [1239.0, 1322.0, 1372.0]}
    older = {**row, "run_id": "r1", "configs_measured": 4}
    m = headlines.MACHINES[1]
    line, before = headlines.search_lines(m, [older, row])
    assert "run r2" in line and "measured 11 configs, 8 of them sampled" in line and "seed 1: sampled" in line
    assert "92.0 %" in line and "beyond the noise" not in line  # the rounds overlap: no shortfall claimed
    assert before == "  - Earlier runs in the file: run r1 (commit abc): 4 configs, 8 sampled, 92.0 % of that run's grid best."  # every run named
    apart = {**row, "winner_rounds": [1000.0, 1010.0, 1020.0]}
    (line,) = headlines.search_lines(m, [apart])
    assert "92.0 % (below it beyond the noise)" in line
    assert headlines.search_lines(m, []) == []


def test_the_search_account_holds_each_winner_against_dalis_usual_start_in_the_same_rounds():
    row = {"seed": 2, "configs_measured": 11, "sampled_measured": 8, "winner_is_start": False, "fraction": 0.964, "grid_size": 51, "rounds": 3,
           "grid_best_rate": 1007.4, "grid_best": "dali-cpu b=256", "run_id": "r3", "commit": "abc",
           "winner_rounds": [971.0, 1004.0, 951.0], "grid_best_rounds": [936.0, 1013.0, 1007.0],
           "usual": "dali-cpu b=128 threads=2 queue=2", "usual_rounds": [1000.0, 961.0, 985.0], "fraction_of_usual": 0.9858}
    m = headlines.MACHINES[1]
    _, usual = headlines.search_lines(m, [row])
    assert "`dali-cpu b=128 threads=2 queue=2`, 961-1,000 images/s" in usual and "98.6 %" in usual
    assert "beyond the noise" not in usual  # the rounds overlap
    below = {**row, "winner_rounds": [900.0, 910.0, 920.0], "fraction_of_usual": 0.9239}
    assert "92.4 % (below it beyond the noise)" in headlines.search_lines(m, [below])[1]
    assert len(headlines.search_lines(m, [{k: v for k, v in row.items() if not k.startswith("usual")}])) == 1  # older rows: no line
