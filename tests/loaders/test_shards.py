"""build_loader under DDP: ranks whose loaders would not make one job's epochs are told so when they are built."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from autotune.loaders.shards import describe, differences
from tests.helpers import run_ranks

RANK = textwrap.dedent("""
    import json, sys, warnings
    import torch.distributed as dist
    import autotune
    from autotune.config.schema import LoaderConfig

    rank, data, init, args = int(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=2)
    mine = args[rank]
    out = {}
    try:
        if mine.get("eval_first"):  # an evaluation loader on this rank alone: not counted among the train loaders
            autotune.build_loader(data, LoaderConfig("torch", 5), device="cpu", shard_id=rank, num_shards=2, pipeline="imagenet-eval").close()
        for n in range(2):  # the second loader of each rank is compared with the other rank's second
            loader = autotune.build_loader(data, LoaderConfig("torch", mine["batch"][n]), device="cpu", shard_id=rank, num_shards=2,
                                           seed=mine.get("seed"), pipeline=mine.get("pipeline"))
            out[n] = len(loader)
            loader.close()
    except autotune.UserError as e:
        out["error"] = str(e)
    print(json.dumps(out))
""")


def _two_ranks(tmp_path: Path, data: Path, args: list[dict]) -> list[dict]:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    ranks = run_ranks([[sys.executable, str(script), str(r), str(data), str(tmp_path / "init"), json.dumps(args)] for r in range(2)], tmp_path, timeout=180)
    assert [code for code, _, _ in ranks] == [0, 0], "\n".join(e[-2000:] for _, _, e in ranks)
    return [json.loads(o.strip().splitlines()[-1]) for _, o, _ in ranks]


@pytest.mark.slow
def test_ranks_with_another_batch_size_are_told_when_the_loaders_are_built(tmp_path, tiny_dataset):
    """A YAML per node: rank 1's second loader has batches of 2, rank 0's of 4; 3 against 6 batches an epoch would
    leave rank 0 waiting for rank 1 at the end of its epoch, for ever. The rank that builds last says so."""
    results = _two_ranks(tmp_path, tiny_dataset, [{"batch": [2, 4]}, {"batch": [2, 2]}])
    errors = [r["error"] for r in results if "error" in r]
    assert errors, results  # the rank that wrote last (both, when they write at once)
    assert all(r["0"] == 6 for r in results)  # the first loaders agreed
    assert "the 2 DDP ranks build different loaders: batch size 4 (rank 0), 2 (rank 1); batches an epoch 3 (rank 0), 6 (rank 1)" in errors[0]
    assert "; the ranks with the shorter epoch would leave the others waiting at its end: build every rank's loader from one YAML" in errors[0]
    assert "\n" not in errors[0]


@pytest.mark.slow
def test_ranks_seeded_apart_with_the_torch_backend_are_told_their_shards_overlap(tmp_path, tiny_dataset):
    """seed=base + rank: each rank's DistributedSampler shuffles with its own seed, so the shards overlap."""
    results = _two_ranks(tmp_path, tiny_dataset, [{"batch": [2, 2], "seed": 0}, {"batch": [2, 2], "seed": 1}])
    errors = [r["error"] for r in results if "error" in r]
    assert errors and "seed 0 (rank 0), 1 (rank 1); the shards would overlap (the DistributedSampler shuffles with the seed)" in errors[0], results


@pytest.mark.slow
def test_ranks_that_agree_build_their_loaders_without_a_word(tmp_path, tiny_dataset):
    results = _two_ranks(tmp_path, tiny_dataset, [{"batch": [2, 4], "seed": 3}, {"batch": [2, 4], "seed": 3}])
    assert results == [{"0": 6, "1": 3}, {"0": 6, "1": 3}]


@pytest.mark.slow
def test_an_eval_loader_built_on_one_rank_alone_does_not_shift_the_comparison(tmp_path, tiny_dataset):
    """Counted with the train loaders, rank 0's extra eval loader was compared with rank 1's train loader."""
    results = _two_ranks(tmp_path, tiny_dataset, [{"batch": [2, 4], "eval_first": True}, {"batch": [2, 4]}])
    assert results == [{"0": 6, "1": 3}, {"0": 6, "1": 3}]


@pytest.mark.slow
def test_an_eval_loader_keeps_each_shards_last_batch_and_its_seed_does_not_count(tmp_path, tiny_dataset):
    """Eval: no shuffle (the seed shapes nothing), and uneven shards may differ by a batch without any hang."""
    results = _two_ranks(tmp_path, tiny_dataset, [{"batch": [5, 5], "seed": 0, "pipeline": "imagenet-eval"},
                                                  {"batch": [5, 5], "seed": 1, "pipeline": "imagenet-eval"}])
    assert all("error" not in r for r in results), results


@pytest.mark.parametrize("world", [8])
def test_many_ranks_are_named_as_runs(world):
    entries = [describe(batch_size=256 if r < 4 else 128, batches=10, pipeline="imagenet-train", images=8000, signature="ab" * 8,
                        seed=None) for r in range(world)]
    assert differences(entries) == ["batch size 256 (ranks 0-3), 128 (ranks 4-7)"]
    entries[6] = {**entries[6], "dataset": "other"}
    assert differences(entries)[1] == "dataset abababababab (ranks 0-5, 7), other (rank 6)"


def test_alone_nothing_is_compared(tiny_dataset):
    from autotune.loaders.shards import ranks_disagree

    entry = describe(batch_size=2, batches=6, pipeline="imagenet-train", images=24, signature="x", seed=0)
    assert ranks_disagree(lambda: entry, 2, "imagenet-train") is None  # no process group: no store to compare through
