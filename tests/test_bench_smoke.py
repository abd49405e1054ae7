"""The benchmark harness's own logic: the grid it builds for a machine, and how it rewrites RESULTS.md."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

tuner_bench = pytest.importorskip("tuner_bench")

from autotune.config.schema import LoaderConfig  # noqa: E402
from autotune.study.space import load_space  # noqa: E402


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
    tuner_bench.write_section("cpu: 2 cores, no GPU", "<!-- section: cpu: 2 cores, no GPU -->\nold cpu\n<!-- /section: cpu: 2 cores, no GPU -->", path)
    tuner_bench.write_section("gpu: 1x H200, 16 cores", "<!-- section: gpu: 1x H200, 16 cores -->\ngpu\n<!-- /section: gpu: 1x H200, 16 cores -->", path)
    tuner_bench.write_section("cpu: 2 cores, no GPU", "<!-- section: cpu: 2 cores, no GPU -->\nnew cpu\n<!-- /section: cpu: 2 cores, no GPU -->", path)
    text = path.read_text()
    assert text.startswith("# Benchmark results")
    assert "new cpu" in text and "old cpu" not in text and "\ngpu\n" in text
    assert text.count("<!-- section:") == 2
