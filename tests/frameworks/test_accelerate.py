"""Hugging Face ``accelerate`` trains from autotune's loaders on the CPU: ``prepare`` re-creates the tuned YAML's
DataLoader (``build_loader(dataset, cfg)``) and keeps its knobs; an ``AutoLoader`` (not a DataLoader) goes through
``prepare`` untouched and explores while the loop trains."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import autotune
from autotune import AutoLoader
from autotune.study.evidence import trial_attrs
from tests.frameworks.data import CANDIDATES, QUICK, Numbered, check_epochs, tuned_yaml

try:  # a framework that is installed but does not import (built for another torch) is skipped too
    import accelerate as _framework
except Exception as e:  # noqa: BLE001 - any import failure of a test extra skips its tests
    pytest.skip(f"accelerate does not import: {e}", allow_module_level=True)
accelerate = _framework

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:.*records no machine:UserWarning")]


@pytest.fixture()
def accelerator(workdir: Path) -> Iterator[Any]:
    yield accelerate.Accelerator(cpu=True)
    accelerate.state.AcceleratorState._reset_state(True)  # the state is one per process: the next test starts afresh


def _train(accelerator: Any, loader: Any, epochs: int) -> tuple[dict[int, list[int]], set[int], Any]:
    """The usual accelerate loop; returns the sample ids by epoch, the workers that read them and the loader prepared."""
    model = torch.nn.Linear(2, 1)
    model, optimizer, loader = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), loader)
    seen: dict[int, list[int]] = collections.defaultdict(list)
    workers: set[int] = set()
    for epoch in range(epochs):
        for x, i, worker in loader:
            loss = model(x.to(accelerator.device)).pow(2).mean()
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            seen[epoch] += i.tolist()
            workers.update(worker.tolist())
    return seen, workers, loader


def test_prepare_keeps_the_tuned_yamls_dataloader_knobs(accelerator: Any, workdir: Path) -> None:
    loader = autotune.build_loader(Numbered(24), autotune.load_config(tuned_yaml(workdir / "autotune.yaml")))
    seen, workers, prepared = _train(accelerator, loader, 2)
    knobs = (prepared.total_batch_size, prepared.num_workers, prepared.prefetch_factor, prepared.persistent_workers)
    assert prepared is not loader and isinstance(prepared, DataLoader)  # accelerate re-creates a DataLoader ...
    assert knobs == (4, 2, 3, True)  # ... with the tuned knobs
    assert prepared.multiprocessing_context.get_start_method() == "fork"
    assert workers == {0, 1}  # read by the YAML's two workers
    check_epochs(seen, 24, 2)


def test_an_autoloader_goes_through_prepare_untouched_and_explores(accelerator: Any) -> None:
    al = AutoLoader(Numbered(48), batch_size=4, shuffle=True, device=str(accelerator.device), config="autotune.yaml", storage=None, seed=3,
                    candidates=CANDIDATES, exploration=QUICK, budget_s=600.0, max_slowdown=100.0)
    try:
        seen, workers, prepared = _train(accelerator, al, 3)
    finally:
        al.close()
    assert prepared is al
    check_epochs(seen, 48, 3)  # every sample once per epoch across the switches
    measured = [trial_attrs(t)["loader"] for t in al.source.study.trials if trial_attrs(t).get("outcome") == "complete"]
    assert {c["num_workers"] for c in measured} >= {0, 1, 2}, measured  # the candidates were measured in the loop
    assert {0, 1} <= workers
    assert not al.exploring and autotune.load_config("autotune.yaml").result["tuned_by"].startswith("AutoLoader")
