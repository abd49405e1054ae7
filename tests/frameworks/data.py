"""What the framework tests share: a Dataset whose batches name their samples and the worker that read them, a tuned
YAML for it, the quick exploration and its candidates, and the check that an epoch delivered every sample once."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from autotune.autoloader import Exploration
from autotune.config.files import save_config
from autotune.config.schema import Config, LoaderConfig
from autotune.config.sections import UserOptions
from autotune.outcomes import Backend

#: what the tuned YAML holds: knobs that differ from the DataLoader's defaults, so a framework that dropped them shows
TUNED: dict[str, Any] = {"num_workers": 2, "prefetch_factor": 3, "persistent_workers": True, "multiprocessing_context": "fork"}

#: every candidate runs 2 batches (1 warm-up, 1 measured): several candidates in an epoch of 12 batches
QUICK = Exploration(warmup_batches=1, measure_batches=1, check_batches=1, max_candidates=4, settle_wait=0.0)
CANDIDATES = [
    {"backend": "user", "num_workers": 0},
    {"backend": "user", "num_workers": 2, "prefetch_factor": 2},
    {"backend": "user", "num_workers": 1, "prefetch_factor": 4, "persistent_workers": True},
]


class Numbered(Dataset):
    """Sample i is ``(x, i, worker)``: x the 2-vector (i, i), ``worker`` the DataLoader worker that read it (-1: the main
    process), so that a batch names its samples and shows how the loader the framework iterated was built."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int, int]:
        info = torch.utils.data.get_worker_info()
        return torch.full((2,), float(i)), i, -1 if info is None else info.id


def tuned_yaml(path: Path) -> Path:
    """A YAML as ``autotune run --dataset FILE.py:FUNC --batch-size 4`` writes it, with ``TUNED``'s knobs."""
    save_config(Config(loader=LoaderConfig(Backend.add("user"), 4, section=UserOptions(**TUNED)), pipeline="imagenet-train", device="cpu"), path)
    return path


def check_epochs(seen: dict[int, list[int]], n: int, epochs: int) -> None:
    """Each of ``epochs`` epochs delivered each of the ``n`` samples exactly once."""
    assert sorted(seen) == list(range(epochs)), sorted(seen)
    for epoch, ids in seen.items():
        assert sorted(ids) == list(range(n)), (epoch, collections.Counter(ids).most_common(3))
