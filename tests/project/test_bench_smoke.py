"""The benchmarks' own logic: the grid built for a machine, how RESULTS.md is rewritten, and each script's smoke run on the CPU."""

from __future__ import annotations

import sys
from collections import Counter

import pytest

from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

harness = pytest.importorskip("harness")
tuner_bench = pytest.importorskip("tuner_bench")

from autotune.config.schema import LoaderConfig  # noqa: E402 - after the benchmarks folder is on sys.path
from autotune.study.space import load_space  # noqa: E402 - after the benchmarks folder is on sys.path


def kinds(grid):
    return Counter(LoaderConfig.from_params(p).describe().split(" ")[0] for p in grid)


@pytest.mark.parametrize(("cores", "device", "want"), [(2, "cpu", {"torch", "dali-cpu"}), (16, "cuda", {"torch", "dali-cpu", "dali-gpu"})])
def test_grid_spans_both_backends_and_stays_in_the_space(cores, device, want):
    space = load_space("default", cores=cores, device=device, dali=True)
    grid = tuner_bench.grid_configs(space, cores, device == "cuda")
    assert len(grid) >= tuner_bench.MIN_GRID
    assert set(kinds(grid)) == want
    assert len({LoaderConfig.from_params(p).describe() for p in grid}) == len(grid)  # distinct
    for p in grid:
        for name, value in p.items():
            if name in space:
                assert space[name].contains(value), (name, value)


def test_sections_replace_their_own_machine_only(tmp_path):
    path = tmp_path / "RESULTS.md"
    harness.write_section("cpu: 2 cores, no GPU", "<!-- section: cpu: 2 cores, no GPU -->\nold cpu\n<!-- /section: cpu: 2 cores, no GPU -->", path)
    harness.write_section("gpu: 1x H200, 16 cores", "<!-- section: gpu: 1x H200, 16 cores -->\ngpu\n<!-- /section: gpu: 1x H200, 16 cores -->", path)
    harness.write_section("cpu: 2 cores, no GPU", "<!-- section: cpu: 2 cores, no GPU -->\nnew cpu\n<!-- /section: cpu: 2 cores, no GPU -->", path)
    text = path.read_text()
    assert text.startswith("# Benchmark results")
    assert "new cpu" in text and "old cpu" not in text and "\ngpu\n" in text
    assert text.count("<!-- section:") == 2


@pytest.mark.slow
def test_autoloader_benchmark_runs_on_the_cpu(tmp_path, tiny_dataset):
    """benchmarks/autoloader_gpu.py with a tiny model on the CPU: the JSON the H200 run writes, in its shape."""
    import json
    import os
    import subprocess

    out = tmp_path / "out.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "autoloader_gpu.py"), "--device", "cpu", "--model", "tiny",
           "--data", str(tiny_dataset), "--images", "24", "--classes", "3", "--batch-size", "4", "--samples", "32", "--budget-s", "3",
           "--skip", "1", "--work", str(tmp_path / "work"), "--variants", "autoloader,torch-defaults", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert [r["variant"] for r in rows] == ["autoloader", "torch-defaults"]
    for r in rows:
        assert set(r) == {"variant", "samples", "wall_s", "settled_samples_per_s"}
        assert r["samples"] >= 32 and r["wall_s"] > 0


def test_ranks_bench_command_is_autotune_run_with_the_issue_flags(tmp_path):
    import argparse

    import ranks_gpu

    from autotune.cli import build_parser

    a = argparse.Namespace(space="dali", ranks=2, device="cuda", n_trials=8, window=0.5, windows=3)
    extra = ["--seed", "1"]
    args = build_parser().parse_args(ranks_gpu.run_args(tmp_path / "data", tmp_path, a, extra))
    assert (args.space, args.gpus, args.device, args.n_trials, args.window, args.windows, args.seed) == ("dali", 2, "cuda", 8, 0.5, 3, 1)
    assert args.out == str(tmp_path / "autotune.yaml")


@pytest.mark.slow
def test_ranks_bench_runs_two_cpu_ranks_by_hand(tmp_path, tiny_dataset, monkeypatch):
    """The independent side for real (two CPU processes, one shard each); the tool's side stubbed."""
    import json

    import ranks_gpu

    from autotune.config.files import save_config
    from autotune.config.schema import Config, LoaderConfig

    cfg = Config(loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 2, "num_workers": 0}), device="cpu")
    yaml_path = tmp_path / "autotune.yaml"
    save_config(cfg, yaml_path)
    tool_side = {"config": cfg.loader.describe(), "total": 20.0, "per_rank": [10.0, 11.0]}
    monkeypatch.setattr(ranks_gpu, "tool", lambda *a, **k: (yaml_path, tool_side))
    out = tmp_path / "ranks.json"
    rc = ranks_gpu.main(["--data", str(tiny_dataset), "--out", str(tmp_path), "--device", "cpu", "--ranks", "2", "--seconds", "0.3", "--warmup", "1",
                         "--json", str(out)])
    assert rc == 0
    rows = json.loads(out.read_text())
    assert [r["measure"] for r in rows] == ["autotune", "independent"]
    for r in rows:
        assert set(r) == {"measure", "ranks", "config", "total_samples_per_s", "per_rank"}
        assert r["ranks"] == 2 and r["config"] == cfg.loader.describe() and len(r["per_rank"]) == 2
    hand = rows[1]
    assert all(x > 0 for x in hand["per_rank"])
    assert hand["total_samples_per_s"] == pytest.approx(sum(hand["per_rank"]), abs=0.2)


def test_the_wide_gpu_grid_spans_what_the_search_issue_names():
    """At least 60 configs: DALI GPU threads 1-16, hw_decoder_load 0-1 by 0.25, queues 1-4, every batch size, the torch side."""
    space = load_space("default", cores=16, device="cuda", dali=True)
    grid = tuner_bench.wide_grid_configs(space, 16)
    assert len(grid) >= 60 and len({LoaderConfig.from_params(p).describe() for p in grid}) == len(grid)
    gpu = [p for p in grid if p.get("dali_device") == "gpu"]
    assert {p["num_threads"] for p in gpu} >= {1, 16} and {p["hw_decoder_load"] for p in gpu} == {0.0, 0.25, 0.5, 0.75, 1.0}
    assert {p["prefetch_queue_depth"] for p in gpu} == {1, 2, 3, 4}
    assert {p["batch_size"] for p in grid} == set(space["batch_size"].choices)
    assert {p["num_workers"] for p in grid if p["backend"] == "torch"} >= {0, 16}
    for p in grid:
        for name, value in p.items():
            if name in space:
                assert space[name].contains(value), (name, value)


def test_grid_restricted_to_some_batch_sizes_holds_only_those(tmp_path):
    from autotune.errors import UserError

    space = load_space("default", cores=16, device="cuda", dali=True)
    grid = tuner_bench.grid_configs(tuner_bench.restrict_batches(space, [128, 256]), 16, True)
    assert {p["batch_size"] for p in grid} == {128, 256}
    assert len(grid) < tuner_bench.MIN_GRID  # allowed: the minimum is for the full grid
    with pytest.raises(UserError, match="--batches"):
        tuner_bench.restrict_batches(space, [128, 100])


def _ttq_args(tmp_path, *extra):
    import time_to_quality as ttq

    own = ["--tag", "t", "--dataset", str(tmp_path / "data"), "--work", str(tmp_path / "work")]
    return ttq.parse([*own, "--", *extra])


def test_ttq_methods_are_autotune_runs_with_their_flags(tmp_path):
    import time_to_quality as ttq

    from autotune.cli import build_parser

    a, extra, _ = _ttq_args(tmp_path, "--space", "cpu", "--device", "cpu")
    got = {name: build_parser().parse_args(ttq.method_command(a, extra, name, 3)[3:]) for name in ttq.METHODS}
    work = tmp_path / "work" / "methods"
    for name, args in got.items():
        assert args.command == "run" and (args.seed, args.json, args.quiet, args.no_report) == (3, True, True, True)
        assert (args.space, args.device) == ("cpu", "cpu")
        assert args.out == str(work / f"{name}-seed3.yaml") and args.storage == f"sqlite:///{work / f'{name}-seed3.db'}"
    assert got["autotune"].budget is None and got["autotune"].sampler == "tpe" and not got["autotune"].no_baselines
    assert got["autotune-b30"].budget == 30
    for name, sampler, pruner in (("random", "random", "none"), ("optuna", "tpe", "median")):
        args = got[name]
        assert (args.budget, args.sampler, args.pruner, args.no_baselines, args.confirm_top) == (60, sampler, pruner, True, 0)
    assert got["warm-start"].warm_start == str(work / "autotune-seed3.yaml") and got["warm-start"].budget == 20


def test_ttq_grid_and_compare_use_the_run_s_own_space_and_pipeline_when_none_is_given(tmp_path):
    """Left out after --, the space and pipeline were None, and the grid stage failed at once on the CPU machine."""
    _, _, opts = _ttq_args(tmp_path)
    assert (opts.space, opts.pipeline) == ("default", "imagenet-train")
    _, _, opts = _ttq_args(tmp_path, "--space", "cpu", "--pipeline", "imagenet-eval")
    assert (opts.space, opts.pipeline) == ("cpu", "imagenet-eval")


@pytest.mark.parametrize("extra", [["--budget", "5"], ["--seed", "1"], ["--model", "resnet50"]])
def test_ttq_refuses_run_options_it_sets_per_method(tmp_path, extra):
    from autotune.errors import UserError

    with pytest.raises(UserError, match=extra[0]):
        _ttq_args(tmp_path, *extra)


@pytest.mark.slow
def test_ttq_compare_and_plot_write_their_files_from_the_stage_results(tmp_path, tiny_dataset):
    """The stages' results already in the work folder: no measurement, the fractions over the best re-measured grid config."""
    import json

    import time_to_quality as ttq

    from autotune.config.files import save_config
    from autotune.config.schema import Config, LoaderConfig

    work = tmp_path / "work"
    fast = {"backend": "dali", "batch_size": 8, "dali_device": "cpu", "num_threads": 2, "prefetch_queue_depth": 2}
    slow = {"backend": "torch", "batch_size": 8, "num_workers": 1}
    defaults = {"backend": "torch", "batch_size": 64, "num_workers": 0, "pin_memory": False}
    key = {n: LoaderConfig.from_params(p).describe() for n, p in (("fast", fast), ("slow", slow), ("defaults", defaults))}
    top = [{"config": key["slow"], "params": slow, "rate": 90.0}, {"config": key["fast"], "params": fast, "rate": 80.0}]
    harness.write_json(work / "grid.json", {"size": 10, "wall_s": 100.0, "backends": ["dali-cpu", "torch"], "batches": [8], "top": top})
    account = {"configs_measured": 9, "sampled_measured": 6, "winner_from": "dali-heuristic"}
    save_config(Config(loader=LoaderConfig.from_params(fast), device="cpu", study=account), work / "methods" / "autotune-seed0.yaml")
    run = {"seed": 0, "command": "python -m autotune run"}
    yaml = str(work / "methods" / "autotune-seed0.yaml")
    harness.write_json(work / "methods" / "autotune-seed0.json", {"method": "autotune", "name": "autotune", **run, "wall_s": 20.0,
                                                                  "config": fast, "config_key": key["fast"], "yaml": yaml})
    harness.write_json(work / "methods" / "random-seed0.json", {"method": "random", "name": "random", **run, "wall_s": 60.0,
                                                                "config": slow, "config_key": key["slow"]})
    harness.write_json(work / "compare.json", {"rounds": 2, "window": 0.5, "windows": 3, "warmup_batches": 2, "device": "cpu", "when": "now",
                                               "configs": {key["fast"]: fast, key["slow"]: slow, key["defaults"]: defaults},
                                               "scores": {key["fast"]: [100.0, 100.0], key["slow"]: [50.0, 50.0], key["defaults"]: [10.0, 10.0]},
                                               "errors": {}, "peers": {"torch defaults": key["defaults"]}, "hardware": harness.machine()})
    out = tmp_path / "out"
    rc = ttq.main(["--tag", "t", "--dataset", str(tiny_dataset), "--work", str(work), "--stages", "compare,plot", "--scenario", "s",
                   "--json", str(out / "t.json"), "--png", str(out / "t.png"), "--results", str(out / "RESULTS.md"),
                   "--scenarios-json", str(out / "scenarios.json"), "--search-json", str(out / "search.json"), "--", "--device", "cpu"])
    assert rc == 0
    # the search's account, a row per default run, with every round of the winner and the grid's best
    (row,) = json.loads((out / "search.json").read_text())
    assert {k: row[k] for k in ("seed", "wall_s", "configs_measured", "sampled_measured", "winner", "winner_is_start", "winner_rate",
                                "grid_best", "grid_best_rate", "fraction")} == {
        "seed": 0, "wall_s": 20.0, "configs_measured": 9, "sampled_measured": 6, "winner": key["fast"], "winner_is_start": True,
        "winner_rate": 100.0, "grid_best": key["fast"], "grid_best_rate": 100.0, "fraction": 1.0}
    assert row["winner_rounds"] == [100.0, 100.0] and row["run_id"]
    assert ttq.main(["--tag", "t", "--dataset", str(tiny_dataset), "--work", str(work), "--stages", "compare", "--json", str(out / "t.json"),
                     "--results", str(out / "RESULTS.md"), "--search-json", str(out / "search.json"), "--", "--device", "cpu"]) == 0
    assert len(json.loads((out / "search.json").read_text())) == 2  # a second run appends: nothing is overwritten
    rows = {r["method"]: r for r in json.loads((out / "t.json").read_text())}
    assert set(rows) == {"grid", "autotune", "random", "torch defaults"}
    assert rows["autotune"]["winner_from"] == "dali-heuristic" and "winner_from" not in rows["random"]  # for the headlines
    assert rows["grid"]["config"] == key["fast"] and (rows["grid"]["wall_s"], rows["grid"]["fraction_of_grid_best"]) == (100.0, 1.0)
    assert (rows["random"]["fraction_of_grid_best"], rows["random"]["wall_s"]) == (0.5, 60.0)
    assert (rows["torch defaults"]["fraction_of_grid_best"], rows["torch defaults"]["wall_s"]) == (0.1, 0.0)
    assert "## Time to a near-best config" in (out / "RESULTS.md").read_text()
    peers = {r["peer"]: r for r in json.loads((out / "scenarios.json").read_text())}
    assert peers["tuned"]["config"] == key["fast"] and peers["torch defaults"]["fraction_of_tuned"] == 0.1
    from autotune._imports import is_available

    assert (out / "t.png").exists() == is_available("plot")


def test_several_ranks_add_the_all_cores_in_every_rank_peer():
    scenarios = pytest.importorskip("scenarios")
    one = scenarios.peers(None, 16, True, [256], dali=False)
    eight = scenarios.peers(None, 16, True, [256], dali=False, node_cores=128)
    assert "workers = all cores, every rank" not in one  # one rank: the rule is the cores peer itself
    assert eight["workers = all cores, every rank"]["num_workers"] == 128  # over-subscribed eight times
    assert eight["workers = cores / ranks, pinned"]["num_workers"] == 16 and eight["workers = 75 % of cores / ranks"]["num_workers"] == 12
    assert one["workers = cores, pinned"]["num_workers"] == 16


@pytest.mark.slow
def test_ddp_benchmark_splits_loading_from_communication(tmp_path, tiny_dataset):
    """benchmarks/ddp_train.py, two CPU ranks (gloo): the loader-fed run reports each rank's wait for its loader,
    the --resident run the same steps and all-reduces with no loader (no wait), so the two split what is lost."""
    import json
    import os
    import socket
    import subprocess

    repo = ROOT
    with socket.socket() as s:  # a free port for the rendezvous (torchrun's --master_port 0 waits forever)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = (repo / "benchmarks" / "cpu-machine.yaml").read_text().replace("/tmp/fpd", str(tiny_dataset))
    for old, new in (("classes: 2", "classes: 3"), ("batch_size: 8", "batch_size: 4"), ("num_workers: 2", "num_workers: 0"),
                     ("persistent_workers: true", "persistent_workers: false")):
        cfg = cfg.replace(old, new)
    (tmp_path / "cfg.yaml").write_text(cfg)
    out = tmp_path / "ddp.json"
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
    for extra in ([], ["--resident"], ["--autoloader", "--budget-s", "2"]):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
               str(repo / "benchmarks" / "ddp_train.py"), "--data", str(tiny_dataset), "--yaml", str(tmp_path / "cfg.yaml"),
               "--device", "cpu", "--model", "tiny", "--warmup", "2", "--seconds", "3" if extra[:1] == ["--autoloader"] else "1", "--json", str(out), *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
    fed, resident, auto = json.loads(out.read_text())
    assert (fed["measure"], resident["measure"], auto["measure"]) == ("ddp-training", "ddp-resident", "ddp-autoloader")
    assert auto["settled_after_s"] is not None and auto["settled_samples_per_s"] > 0 and auto["candidates"] >= 1
    for row in (fed, resident, auto):
        assert row["ranks"] == 2 and len(row["per_rank"]) == 2 and len(row["loader_wait_share"]) == 2
        assert row["total_samples_per_s"] > 0
        assert abs(sum(row["per_rank"]) - row["total_samples_per_s"]) <= 0.1 * row["total_samples_per_s"]
    assert all(0.1 < w < 1 for w in fed["loader_wait_share"])  # no workers: every batch is decoded while the rank waits
    assert all(w < 0.02 for w in resident["loader_wait_share"])  # the kept batch: only the clock's own cost


def test_each_round_of_the_peers_is_saved_as_it_ends():
    """A run cut short (a machine taken back mid-call) keeps the rounds it finished: after_round sees each."""
    side = object.__new__(harness.SideBySide)  # no zygote: `once` is replaced
    rates = iter([100.0, None, 110.0, None])
    side.once = lambda params: (r, "") if (r := next(rates)) else (None, "timeout: too slow")
    seen = []
    scores, errors = side.rounds({"a": {}, "b": {}}, 2, after_round=lambda s, e: seen.append(({k: list(v) for k, v in s.items()}, dict(e))))
    assert len(seen) == 2 and sum(map(len, seen[0][0].values())) == 1 and sum(map(len, seen[1][0].values())) == 2
    assert seen[-1] == (scores, errors) and set(errors.values()) == {"timeout: too slow"}


def test_the_scenario_table_is_written_from_the_json_alone(tmp_path):
    """scenarios.py --table measures nothing: RESULTS.md's section from results/scenarios.json, with the verdict per scenario."""
    import json

    scenarios = pytest.importorskip("scenarios")
    rows = [{"scenario": "s", "machine": "m", "peer": "torch defaults", "config": "torch b=64 workers=0", "samples_per_s": 100.0,
             "fraction_of_tuned": 0.5, "scores": [90.0, 110.0]},
            {"scenario": "s", "machine": "m", "peer": "tuned", "config": "torch b=64 workers=2", "samples_per_s": 200.0,
             "fraction_of_tuned": 1.0, "scores": [190.0, 210.0], "tuning_s": 55.0, "peak_host_mib": 700.0}]
    (tmp_path / "s.json").write_text(json.dumps(rows))
    results = tmp_path / "RESULTS.md"
    assert scenarios.main(["--table", "--json", str(tmp_path / "s.json"), "--results", str(results)]) == 0
    text = results.read_text()
    assert text.startswith("# Benchmark results") and "python benchmarks/scenarios.py --table" in text
    assert "| s | m | torch defaults | `torch b=64 workers=0` | 100 | 50 % | best peer |" in text
    assert "**200 %** | meets the 97 % goal; beyond noise |" in text and "tuned in 55 s; peak host 700 MiB" in text
    assert "| s | m | 1 | 200 % | 200 % | 200 % | 1 of 1 |" in text


def test_every_scenario_run_is_kept_and_the_table_shows_the_median_and_the_worst(tmp_path, monkeypatch):
    """save_rows replaced a scenario's rows with each new run, so a run that lost (86 %) survived only in prose: each
    run is kept with its run id and commit, and the table gives every run's verdict, their median and the worst."""
    import json

    scenarios = pytest.importorskip("scenarios")
    monkeypatch.setenv("AUTOTUNE_BENCH_COMMIT", "abc1234")
    path = tmp_path / "s.json"

    def run(tuned: float, run_id: str) -> None:
        rows = [{"peer": "cores", "config": "torch b=64 workers=2", "samples_per_s": 100.0, "fraction_of_tuned": 100.0 / tuned, "scores": [99.0, 101.0]},
                {"peer": "tuned", "config": "torch b=64 workers=1", "samples_per_s": tuned, "fraction_of_tuned": 1.0, "scores": [tuned - 1, tuned + 1]}]
        scenarios.save_rows(path, "s", "m", rows, run_id)

    run(120.0, "r1")
    run(86.0, "r2")
    run(86.0, "r2")  # the same run's next round: its rows replaced, not added
    run(110.0, "r3")
    rows = json.loads(path.read_text())
    assert [r["run_id"] for r in rows] == ["r1", "r1", "r2", "r2", "r3", "r3"] and {r["commit"] for r in rows} == {"abc1234"}
    text = scenarios.table(rows)
    assert "| s | m | 3 | 120 %, 86 %, 110 % | 110 % | 86 % | 2 of 3 |" in text
    assert "| s (3 runs) | m | cores |" in text  # the latest run's peers


@pytest.mark.slow
def test_the_paired_noise_benchmark_writes_every_repetition_and_the_verdicts(tmp_path, tiny_dataset):
    """benchmarks/paired_noise.py on the CPU: the paired, fresh and null repetitions, each with its ratio and verdict."""
    import json
    import os
    import subprocess

    out = tmp_path / "noise.json"
    a = json.dumps({"backend": "torch", "batch_size": 4, "num_workers": 0})
    b = json.dumps({"backend": "torch", "batch_size": 8, "num_workers": 0})
    cmd = [sys.executable, str(ROOT / "benchmarks" / "paired_noise.py"), "--dataset", str(tiny_dataset), "--a", a, "--b", b, "--processes", "1",
           "--rounds", "2", "--window", "0.1", "--windows", "2", "--null", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(out.read_text())
    assert [r["method"] for r in got["rows"]] == ["paired", "fresh", "null"]
    assert all(r["ratio"] > 0 and r["verdict"] in ("alike", "b faster", "b slower") for r in got["rows"])
    assert len(got["rows"][0]["rounds"]) == 2 and set(got["summary"]) == {"paired", "fresh", "null"}
    assert got["command"].startswith("python benchmarks/paired_noise.py --dataset ")


def test_start_spread_reads_every_compare_and_puts_the_steadiest_first(tmp_path):
    start_spread = pytest.importorskip("start_spread")
    logs = []
    for i, (a, b) in enumerate([(25_000, 14_000), (26_000, 30_000), (24_000, 25_000)]):
        log = tmp_path / f"c{i}" / "compare.log"
        log.parent.mkdir()
        log.write_text(f"compare: 2 configs, 1 rounds, interleaved\nround 1/1 dali-gpu steady: {a:,}/s\nround 1/1 dali-gpu wild: {b:,}/s\n"
                       + ("round 1/1 once: 1/s\n" if i == 0 else "")
                       + "compare: wrote the section 'time to quality, gpu: 1x NVIDIA H100 80GB HBM3, 16 cores' of x\n")
        logs.append(log)
    text = start_spread.section(logs, 3, "cmd")
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == ["dali-gpu steady", "dali-gpu wild"]  # `once`: read once, no row
    assert "| 3 (3 compares) | 25,000 |" in rows[0] and "14,000-30,000" in rows[1] and "(H100; 1 round each" in text
    results = tmp_path / "RESULTS.md"
    assert start_spread.main([*map(str, logs), "--least", "3", "--results", str(results)]) == 0
    assert "## The starts across fresh processes" in results.read_text()


@pytest.mark.slow
def test_the_dali_build_probe_times_every_step_of_every_config_in_each_round(tmp_path, tiny_dataset):
    """benchmarks/dali_build.py on the CPU: each round builds every config once, each reading has every step."""
    import json
    import os
    import subprocess

    pytest.importorskip("nvidia.dali")
    out = tmp_path / "build.json"
    cfg = json.dumps({"backend": "dali", "batch_size": 4, "dali_device": "cpu", "num_threads": 1, "prefetch_queue_depth": 1})
    cmd = [sys.executable, str(ROOT / "benchmarks" / "dali_build.py"), "--dataset", str(tiny_dataset), "--rounds", "2",
           "--config", f"one={cfg}", "--config", f"two={cfg.replace('1, ', '2, ', 1)}", "--parallel", "2", "--rate-s", "0.1", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(out.read_text())
    alone = [(r["round"], r["config"]) for r in got["rows"] if "parallel" not in r]
    assert alone == [(1, "one"), (1, "two"), (2, "two"), (2, "one")]  # rotated
    assert sorted((r["round"], r["process"]) for r in got["rows"] if r.get("parallel") == 2) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert all(r[k] >= 0 for r in got["rows"] for k in ("define_s", "build_s", "iterator_s", "first_s", "close_s"))
    assert all(r["rate"] > 0 for r in got["rows"] if "parallel" not in r) and got["median"]["one"]["rate"] > 0
    assert set(got["median"]) == {"one", "two", "one, 2 at once"} and got["command"].startswith("python benchmarks/dali_build.py --dataset ")
