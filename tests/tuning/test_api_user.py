"""``autotune.tune`` over the user's own Dataset: a ``FILE.py:FUNC`` string, a module-level function, a Dataset object."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import autotune
from autotune.dataset.user import dataset_spec
from autotune.errors import UserError
from autotune.tuning.api import _user_target

SHORT = {"device": "cpu", "window_s": 0.2, "windows": 2, "warmup_batches": 1, "confirm_top": 0, "report": False}


def make() -> torch.utils.data.TensorDataset:
    return torch.utils.data.TensorDataset(torch.arange(12.0), torch.arange(12))


@pytest.mark.slow
def test_tune_takes_a_pipeline_function_and_returns_its_config(workdir: Path) -> None:
    (workdir / "tiny_pipeline.py").write_text("import torch\n\n\ndef make():\n"
                                               "    return torch.utils.data.TensorDataset(torch.randn(64, 3, 4, 4), torch.arange(64))\n")
    cfg = autotune.tune("tiny_pipeline.py:make", batch_size=8, n_trials=2, **SHORT)
    assert cfg.loader.backend.value == "user" and cfg.batch_size == 8
    assert cfg.dataset["function"]["name"] == "tiny_pipeline:make"
    loader = autotune.build_loader(torch.utils.data.TensorDataset(torch.zeros(16, 2), torch.arange(16)), cfg)
    assert sum(len(y) for _, y in loader) == 16


def test_a_function_is_named_and_a_dataset_object_is_pickled_for_the_trials() -> None:
    assert _user_target(make) == f"{__name__}:make"
    target = _user_target(make())
    assert target.endswith(".py:dataset")
    again = dataset_spec(target).dataset
    assert len(again) == 12 and again[3][1].item() == 3


def test_a_dataset_that_does_not_pickle_is_one_line() -> None:
    class Local(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 1

        def __getitem__(self, i: int) -> int:
            return i

    with pytest.raises(UserError, match="does not pickle"):
        _user_target(Local())


def test_a_pipeline_needs_its_batch_size(workdir: Path) -> None:
    (workdir / "p.py").write_text("def make():\n    return [1, 2]\n")
    with pytest.raises(UserError, match="pass its batch_size "):
        autotune.tune("p.py:make", n_trials=1, **SHORT)
