"""benchmarks/user_pipelines.py: the peers of the user's own pipelines, RESULTS.md's section written from the JSON alone,
and a run end to end on tiny data (pipelines a and e on the CPU, one round, a peer made to fail)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

harness = pytest.importorskip("harness")
user_pipelines = pytest.importorskip("user_pipelines")

ROW_KEYS = {"pipeline", "machine", "limit", "limit_how", "peer", "config", "samples_per_s", "rounds", "fraction_of_tuned", "failed", "error",
            "tune_s", "batch_size", "device", "run_id", "commit", "command", "when"}


def row(peer, rounds, run_id="r2", **kw):
    rate = sorted(rounds)[len(rounds) // 2] if rounds else None
    return {"pipeline": "a: torchvision v2", "machine": "m", "limit": "none", "limit_how": None, "peer": peer, "config": {"num_workers": 2},
            "samples_per_s": rate, "rounds": rounds, "fraction_of_tuned": None, "failed": rate is None, "error": None if rounds else "exit 1: boom",
            "tune_s": 61.0, "batch_size": 32, "device": "cpu", "run_id": run_id, "commit": "abc", "command": "python benchmarks/user_pipelines.py",
            "when": "2026-12-01 00:00 UTC", **kw}


def test_the_results_section_is_the_table_of_the_json():
    """RESULTS.md's section is what `user_pipelines.py --table` writes from results/user-pipelines.json: the two never disagree."""
    rows = harness.read_json(user_pipelines.RESULTS_JSON)
    assert isinstance(rows, list), "benchmarks/results/user-pipelines.json is missing (an empty list before the first run)"
    assert user_pipelines.table(rows) + "\n" in harness.RESULTS.read_text(), "run: python benchmarks/user_pipelines.py --table"


def test_the_table_shows_each_peer_the_failures_and_the_verdict_of_the_newest_run(tmp_path):
    rows = [row("tuned", [50.0], run_id="r1"),  # an older run of the same group: left out of the table
            row("DataLoader defaults", [10.0, 11.0, 12.0]), row("workers = cores, pinned", [80.0, 90.0, 95.0]),
            row("workers = os.cpu_count(), pinned", [80.0, 90.0, 95.0], same_as="workers = cores, pinned"),
            row("bad", []), row("tuned", [96.0, 100.0, 101.0])]
    (tmp_path / "u.json").write_text(json.dumps(rows))
    results = tmp_path / "RESULTS.md"
    assert user_pipelines.main(["--table", "--json", str(tmp_path / "u.json"), "--results", str(results)]) == 0
    text = results.read_text()
    assert text.startswith("# Benchmark results") and "python benchmarks/user_pipelines.py --table" in text
    assert "### a: torchvision v2 · m · limit none" in text and text.count("| **tuned** |") == 1
    assert "| workers = cores, pinned | `{\"num_workers\":2}` | 90 | 80–95 |" in text
    assert "| bad | `{\"num_workers\":2}` | failed | – | – | exit 1: boom |" in text
    assert "same as workers = cores, pinned" in text
    assert "Tuned: **111 %** of the best peer (workers = cores, pinned): meets the 97 % goal; beyond noise; tuned in 61 s" in text
    assert "in 1 of 1 groups, beyond noise in 1." in text


def test_a_peer_that_crashed_in_some_rounds_is_failed_and_no_best_peer():
    """Under a 64 MiB /dev/shm the rule of thumb ran in two fresh processes of three: a loader to train with is one
    that does not die, so it is failed (its completed rounds shown) and the verdict is against the peers that held."""
    rows = user_pipelines.group_rows({"workers = cores, pinned": {"num_workers": 2}, "DataLoader defaults": {}, "tuned": {"num_workers": 2}},
                                     {}, {"workers = cores, pinned": [644.0, 638.0], "DataLoader defaults": [415.0, 410.0, 423.0],
                                          "tuned": [534.0, 541.0, 537.0]}, {"workers = cores, pinned": "exit 1: RuntimeError: shm"}, {}, 3)
    cores = rows[0]
    assert cores["failed"] and cores["failed_rounds"] == 1 and cores["samples_per_s"] == 641.0 and cores["error"] == "exit 1: RuntimeError: shm"
    assert not rows[1]["failed"] and rows[1]["failed_rounds"] == 0
    stamped = [{**row(r["peer"], r["rounds"]), **r} for r in rows]
    line, meets, clear = user_pipelines.verdict(stamped)
    assert line.startswith("**129 %** of the best peer (DataLoader defaults)") and meets and clear
    # a row written before failed_rounds was recorded: the rounds it lacks against the group's most
    old = [row("workers = cores, pinned", [644.0, 638.0]), row("DataLoader defaults", [415.0, 410.0, 423.0]), row("tuned", [534.0, 541.0, 537.0])]
    assert user_pipelines.verdict(old)[0].startswith("**129 %** of the best peer (DataLoader defaults)")
    assert "644, crashed in 1 of 3" in user_pipelines.table(old)  # the helper's rate: the upper middle round


def test_within_noise_and_a_failed_tuning_are_said():
    close = [row("workers = cores, pinned", [90.0, 100.0]), row("tuned", [95.0, 99.0])]
    assert user_pipelines.verdict(close)[1:] == (True, False) and "; within noise;" in user_pipelines.verdict(close)[0]
    behind = [row("workers = cores, pinned", [1463.0, 1798.0, 1828.0]), row("tuned", [254.0, 270.0, 278.0])]
    line, meets, clear = user_pipelines.verdict(behind)  # a tuned config at a sixth of the peer is no "within noise"
    assert "misses the 97 % goal; behind beyond noise;" in line and not meets and not clear
    failed = [row("workers = cores, pinned", [90.0]), row("tuned", [])]
    line, meets, clear = user_pipelines.verdict(failed)
    assert line.startswith("tuned config failed (exit 1: boom)") and not meets and not clear


def test_the_tuned_keywords_in_a_plain_dataloader_are_no_peer_of_the_verdict_but_a_line_of_their_own():
    """The same settings as the tuned config: as the best peer, 97 % would no longer be against the settings users write."""
    rs = [row("workers = cores, pinned", [900.0, 950.0, 940.0]), row(user_pipelines.PLAIN, [1000.0, 1010.0, 990.0]),
          row("tuned", [960.0, 980.0, 970.0], through=user_pipelines.THROUGH)]
    line, meets, clear = user_pipelines.verdict(rs)
    assert line.startswith("**103 %** of the best peer (workers = cores, pinned)") and meets and clear
    assert user_pipelines.plain_line(rs)[-1] == ("Through `autotune.build_loader(dataset, cfg)`: 97 % of the same keywords in a plain "
                                                 "DataLoader (every round slower).")
    table = user_pipelines.table(rs)
    assert "read through `autotune.build_loader(dataset, cfg)`" in table and "97 % of the same keywords" in table


def test_the_peers_follow_the_usable_cores_and_os_cpu_count():
    torch_peers = user_pipelines.peers("torch", cores=4, cpu_count=16, cuda=True)
    assert torch_peers["DataLoader defaults"] == {}
    assert torch_peers["75 % of cores, pinned, persistent"] == {"num_workers": 3, "pin_memory": True, "persistent_workers": True}
    assert torch_peers["workers = cores, pinned"]["num_workers"] == 4 and torch_peers["workers = os.cpu_count(), pinned"]["num_workers"] == 16
    dali_gpu = user_pipelines.peers("dali", cores=16, cpu_count=16, cuda=True)
    assert dali_gpu["DALI's usual start"] == {"num_threads": 8, "prefetch_queue_depth": 2, "hw_decoder_load": 0.65}
    assert all("hw_decoder_load" not in p for p in user_pipelines.peers("dali", cores=2, cpu_count=2, cuda=False).values())


@pytest.mark.slow
def test_the_benchmark_runs_end_to_end_and_appends_rows(tmp_path, tiny_dataset):
    """Pipelines a and e (e where DALI is installed) on 24 small JPEGs: tuned, every peer measured once, a bad peer a failed row,
    the rows appended after the rows already there, in both files."""
    letters = "a,e" if harness.machine().get("dali") else "a"
    out, also = tmp_path / "u.json", tmp_path / "also.json"
    out.write_text(json.dumps([{"pipeline": "older run"}]))
    cmd = [sys.executable, str(ROOT / "benchmarks" / "user_pipelines.py"), "--pipelines", letters, "--data", str(tiny_dataset), "--batch-size", "4",
           "--device", "cpu", "--rounds", "1", "--warmup", "1", "--window", "0.3", "--budget", "60", "--limit", "cpus4", "--limit-how", "test",
           "--work", str(tmp_path / "work"), "--json", str(out), "--also-write", str(also), "--extra-peer", 'bad={"num_workers": -1}',
           "--", "--n-trials", "2", "--window", "0.2", "--windows", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert rows[0] == {"pipeline": "older run"} and rows[1:] == json.loads(also.read_text())
    for letter in letters.split(","):
        group = [r for r in rows[1:] if r["pipeline"].startswith(f"{letter}:")]
        assert {r["peer"] for r in group} >= {"bad", "tuned"} and len(group) == (7 if letter == "a" else 6)
        tuned = next(r for r in group if r["peer"] == "tuned")
        if letter == "a":  # a Dataset: its tuned config read as a user trains with it, and its keywords plainly beside it
            plain = next(r for r in group if r["peer"] == user_pipelines.PLAIN)
            assert tuned["through"] == user_pipelines.THROUGH and "through" not in plain and plain["config"] == tuned["config"]
            assert not plain["failed"] and not plain.get("same_as")
        for r in group:
            assert ROW_KEYS <= set(r) and r["limit"] == "cpus4" and r["limit_how"] == "test" and r["batch_size"] == 4 and r["tune_s"] > 0
            assert r["failed"] == (r["samples_per_s"] is None) and (r["error"] is None) != r["failed"]
        bad = next(r for r in group if r["peer"] == "bad")
        assert bad["failed"] and "\n" not in bad["error"] and bad["rounds"] == []
        assert not next(r for r in group if r["peer"] == "tuned")["failed"], group
