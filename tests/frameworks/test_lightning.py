"""A Lightning ``Trainer`` trains from autotune's loaders on the CPU: the tuned YAML's DataLoader
(``build_loader(dataset, cfg)``) as it is, and an ``AutoLoader`` (an iterable, not a DataLoader) exploring while the
Trainer runs, passed to ``fit`` or returned by the module's ``train_dataloader()``."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest
import torch

import autotune
from autotune import AutoLoader
from autotune.study.evidence import trial_attrs
from tests.frameworks.data import CANDIDATES, QUICK, TUNED, Numbered, check_epochs, tuned_yaml

try:  # a framework that is installed but does not import (built for another torch) is skipped too
    import lightning as _framework
except Exception as e:  # noqa: BLE001 - any import failure of a test extra skips its tests
    pytest.skip(f"lightning does not import: {e}", allow_module_level=True)
L: Any = _framework

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:.*records no machine:UserWarning"),
              pytest.mark.filterwarnings("ignore::lightning.fabric.utilities.warnings.PossibleUserWarning"),
              pytest.mark.filterwarnings("ignore:.*LeafSpec.* is deprecated")]


class Tiny(L.LightningModule):
    """One linear layer; it records each batch's sample ids by epoch and the workers that read them."""

    def __init__(self, loader: Any = None) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.loader = loader
        self.seen: dict[int, list[int]] = collections.defaultdict(list)
        self.workers: set[int] = set()

    def train_dataloader(self) -> Any:  # used when fit() is given no loader: under DDP, built after the process group
        return self.loader

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, i, worker = batch
        self.seen[self.current_epoch] += i.tolist()
        self.workers.update(worker.tolist())
        return self.layer(x).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _trainer(root: Path, epochs: int) -> Any:
    return L.Trainer(accelerator="cpu", devices=1, max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, default_root_dir=root)


def test_the_tuned_yamls_dataloader_is_the_one_the_trainer_iterates(workdir: Path) -> None:
    loader = autotune.build_loader(Numbered(24), autotune.load_config(tuned_yaml(workdir / "autotune.yaml")))
    model, trainer = Tiny(), _trainer(workdir, 2)
    trainer.fit(model, train_dataloaders=loader)
    assert trainer.train_dataloader is loader  # not rebuilt: its tuned knobs are those training ran with
    assert (loader.batch_size, loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == (4, TUNED["num_workers"], 3, True)
    assert model.workers == {0, 1}  # read by the YAML's two workers, not in the main process
    check_epochs(model.seen, 24, 2)


@pytest.mark.parametrize("given", ["fit", "hook"])
def test_an_autoloader_explores_while_the_trainer_trains(workdir: Path, given: str) -> None:
    al = AutoLoader(Numbered(48), batch_size=4, shuffle=True, device="cpu", config="autotune.yaml", storage=None, seed=3, candidates=CANDIDATES,
                    exploration=QUICK, budget_s=600.0, max_slowdown=100.0)
    model, trainer = Tiny(al if given == "hook" else None), _trainer(workdir, 3)
    try:
        trainer.fit(model, train_dataloaders=al if given == "fit" else None)
    finally:
        al.close()
    assert trainer.train_dataloader is al
    check_epochs(model.seen, 48, 3)  # every sample once per epoch across the switches
    measured = [trial_attrs(t)["loader"] for t in al.source.study.trials if trial_attrs(t).get("outcome") == "complete"]
    assert {c["num_workers"] for c in measured} >= {0, 1, 2}, measured  # the candidates were measured in the Trainer's loop
    assert {0, 1} <= model.workers  # candidates with workers served training steps
    assert sum(h["action"] == "switch" for h in al.history) >= 3, al.history
    assert not al.exploring and Path("autotune.yaml").exists()
    assert autotune.load_config("autotune.yaml").result["tuned_by"].startswith("AutoLoader")
