"""AutoLoader over the user's own Dataset (``AutoLoader(dataset, batch_size=..., collate_fn=...)``): the kind user's
DataLoader over the part of each epoch not yet delivered, so that every sample comes once per epoch across switches."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
import torch
from torch.utils.data import Dataset

from autotune import AutoLoader
from autotune.autoloader import Exploration
from autotune.errors import UserError

#: every candidate runs 2 batches (1 warm-up, 1 measured): several candidates in an epoch of 13 batches
QUICK = Exploration(warmup_batches=1, measure_batches=1, check_batches=1, max_candidates=6, settle_wait=0.0)

CANDIDATES = [
    {"backend": "user", "num_workers": 0},
    {"backend": "user", "num_workers": 1, "prefetch_factor": 2},
    {"backend": "user", "num_workers": 2, "prefetch_factor": 4, "persistent_workers": True},
]


class Numbered(Dataset):
    """Sample i is the dict {"x": i as a 2-vector, "i": i}: a batch names its samples."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {"x": torch.full((2,), float(i)), "i": i}


def collate(items: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.stack([d["x"] for d in items]), torch.tensor([d["i"] for d in items])


pytestmark = pytest.mark.usefixtures("in_tmp_then_no_mp_helpers")


def _epoch(al: AutoLoader) -> list[int]:
    seen = []
    for x, i in al:
        assert torch.equal(x[:, 0], i.float())  # the user's collate output, untouched
        seen += i.tolist()
    return seen


@pytest.mark.parametrize("drop_last", [False, True])
def test_every_sample_once_per_epoch_across_switches(drop_last: bool) -> None:
    al = AutoLoader(Numbered(50), batch_size=4, collate_fn=collate, shuffle=True, device="cpu", config="autotune.yaml", storage=None, seed=3,
                    candidates=CANDIDATES, exploration=QUICK, budget_s=600.0, max_slowdown=100.0, drop_last=drop_last)
    try:
        for _ in range(3):
            seen = _epoch(al)
            assert len(seen) == len(set(seen)), collections.Counter(seen).most_common(3)
            assert len(seen) == (48 if drop_last else 50) and set(seen) <= set(range(50))
            assert seen != sorted(seen)  # shuffled
    finally:
        al.close()
    assert any(0 < h["batch"] for h in al.history), al.history  # it switched within an epoch
    assert Path("autotune.yaml").exists()


def test_a_settled_config_is_the_users_dataloader_in_the_datasets_order() -> None:
    al = AutoLoader(Numbered(10), batch_size=4, collate_fn=collate, shuffle=False, device="cpu", config=None, storage=None, budget_s=0)
    assert [i.tolist() for _, i in al] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    al.close()


def test_with_indices_over_a_dataset_is_one_line() -> None:
    with pytest.raises(UserError, match="with_indices=True is for a dataset folder"):
        AutoLoader(Numbered(10), batch_size=4, device="cpu", config=None, storage=None, with_indices=True)


@pytest.fixture
def docker_shm(monkeypatch: pytest.MonkeyPatch) -> None:
    """/dev/shm as Docker mounts it by default: 64 MiB, all free."""
    from autotune.trials.guard import _budgets

    monkeypatch.setattr(_budgets, "shm_free_mib", lambda path=_budgets.SHM_PATH: 64.0)


#: whole batches of 32 from 2 workers with 4 prefetched (the user kind sizes a sample as a float32 crop of 224: 18 MiB
#: a batch) need 165 MiB of /dev/shm: in a container's 64 MiB each crashes
WORKERS = [{"backend": "user", "num_workers": 2, "prefetch_factor": 4, "persistent_workers": True},
           {"backend": "user", "num_workers": 1, "prefetch_factor": 2}]


def test_in_a_64_mib_shm_every_candidate_with_workers_hands_over_smaller_batches(docker_shm: None) -> None:
    al = AutoLoader(Numbered(200), batch_size=32, collate_fn=collate, device="cpu", config="autotune.yaml", storage=None, seed=3,
                    candidates=WORKERS, exploration=QUICK, budget_s=600.0, max_slowdown=100.0)
    try:
        for _ in range(2):
            seen = _epoch(al)
            assert sorted(seen) == list(range(200))
    finally:
        al.close()
    from autotune.config.schema import LoaderConfig
    from autotune.loaders.memory import estimate

    tried = [LoaderConfig.from_params(t.user_attrs["loader"]) for t in al.source.study.trials if t.user_attrs.get("loader")]
    assert any(c.options.worker_batch for c in tried), al.history
    need = {c.describe(): estimate(c, al.dataset, "imagenet-train", "cpu")["shm_mib"] for c in tried}
    assert all(v <= 0.8 * 64 for v in need.values()), need  # fitted: none crashes on /dev/shm


def test_a_yaml_tuned_with_room_for_whole_batches_is_fitted_to_a_64_mib_shm(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.trials.guard import _budgets

    monkeypatch.setattr(_budgets, "shm_free_mib", lambda path=_budgets.SHM_PATH: 8192.0)  # tuned with room for them
    once = Exploration(warmup_batches=1, measure_batches=1, check_batches=1, max_candidates=1, settle_wait=0.0)
    al = AutoLoader(Numbered(200), batch_size=32, collate_fn=collate, device="cpu", config="autotune.yaml", storage=None, seed=3,
                    candidates=WORKERS[:1], exploration=once, budget_s=600.0, max_slowdown=100.0)
    for _ in range(2):
        _epoch(al)
    al.close()
    assert al.settled is not None and al.settled.options.num_workers == 2 and not al.settled.options.worker_batch
    monkeypatch.setattr(_budgets, "shm_free_mib", lambda path=_budgets.SHM_PATH: 64.0)
    again = AutoLoader(Numbered(200), batch_size=32, collate_fn=collate, device="cpu", config="autotune.yaml", storage=None, seed=3)
    try:
        assert again.settled is not None and again.settled.options.num_workers == 2 and again.settled.options.worker_batch
        assert sorted(_epoch(again)) == list(range(200))
    finally:
        again.close()


def test_the_shm_budget_is_the_smallest_of_every_ranks_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under DDP over several nodes every rank builds rank 0's decision: it must fit the node with the least /dev/shm."""
    from autotune.autoloader._agree import Agreement
    from autotune.autoloader._setup import shm_budget

    comm = Agreement()
    monkeypatch.setattr(comm, "gather", lambda value: [value, 51.2, None])  # this node, one with Docker's 64 MiB, one without /dev/shm
    assert shm_budget(comm) == 51.2
    monkeypatch.setattr(comm, "gather", lambda value: [None])
    assert shm_budget(comm) is None


def test_a_yaml_tuned_over_the_same_dataset_is_used_whether_or_not_it_drops_the_last_batch() -> None:
    """With the user's own transforms the preset says only whether the last partial batch is dropped: a YAML that
    ``autotune run --dataset FILE.py:FUNC`` wrote (imagenet-train) was explored again, and overwritten, by an AutoLoader
    left at ``drop_last=False``. The YAML names the Dataset by its class, not by an address that changes every run."""
    import yaml

    once = Exploration(warmup_batches=1, measure_batches=1, check_batches=1, max_candidates=1, settle_wait=0.0)
    al = AutoLoader(Numbered(40), batch_size=4, collate_fn=collate, device="cpu", config="autotune.yaml", storage=None, seed=3,
                    candidates=CANDIDATES[:1], exploration=once, budget_s=600.0, max_slowdown=100.0, drop_last=True)
    for _ in range(2):
        _epoch(al)
    al.close()
    written = yaml.safe_load(Path("autotune.yaml").read_text())
    assert written["pipeline"] == "imagenet-train"
    assert written["dataset"]["path"] == "<tests.autoloader.test_user_dataset:Numbered object>", written["dataset"]
    before = Path("autotune.yaml").read_bytes()
    again = AutoLoader(Numbered(40), batch_size=4, collate_fn=collate, device="cpu", config="autotune.yaml", storage=None, seed=3)
    try:
        assert again.settled is not None and not again.exploring  # the YAML holds: nothing explored again
        assert sorted(_epoch(again)) == list(range(40))
    finally:
        again.close()
    assert Path("autotune.yaml").read_bytes() == before


@pytest.mark.parametrize(("script", "unguarded"), [
    ("import autotune\nloader = autotune.AutoLoader(ds, batch_size=4)\n", True),
    ("def main():\n    pass\n\n\nif __name__ == '__main__':\n    main()\n", False),
    ('if __name__ == "__main__":  # train\n    pass\n', False),
    ('if "__main__" == __name__:\n    pass\n', False),
    ('if (__name__ == "__main__") and True:\n    pass\n', False),
    ('"""Run with:\n\nif __name__ == "__main__":\n    main()\n"""\nimport autotune\n', True),  # a docstring's guard is none
    ('def f():\n    if __name__ == "__main__":\n        pass\n', True),  # inside a function: no guard of the script
])
def test_a_script_without_a_main_guard_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str, unguarded: bool) -> None:
    import sys
    import types

    from autotune.dataset.user import unguarded_main

    path = tmp_path / "train.py"
    path.write_text(script)
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__file__=str(path)))
    assert unguarded_main() == (str(path) if unguarded else None)
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace())  # python -c, an interactive session
    assert unguarded_main() is None


@pytest.mark.slow
def test_a_training_script_without_a_main_guard_is_not_run_again_by_spawned_workers(tmp_path: Path) -> None:
    """Spawn and forkserver workers import the script again: without the guard its top level ran 7 times, each making
    an AutoLoader, and every spawn and forkserver candidate failed with an empty message."""
    import subprocess
    import sys

    (tmp_path / "train.py").write_text(
        "import os, torch\n"
        "from torch.utils.data import Dataset\n"
        "import autotune\n"
        "print('top level', os.getpid(), flush=True)\n"
        "class Squares(Dataset):\n"
        "    def __len__(self):\n        return 64\n"
        "    def __getitem__(self, i):\n        return torch.full((2,), float(i))\n"
        "from autotune.autoloader import Exploration\n"
        "quick = Exploration(warmup_batches=1, measure_batches=1, check_batches=1, max_candidates=8, settle_wait=0.0)\n"
        "loader = autotune.AutoLoader(Squares(), batch_size=4, device='cpu', config=None, storage=None, budget_s=30, exploration=quick)\n"
        "for _ in range(4):\n    for b in loader:\n        pass\n"
        "loader.close()\n"
        "print('tried', *sorted({str(h.get('config')) for h in loader.history}), sep='\\n', flush=True)\n"
    )
    done = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("top level") == 1, done.stdout
    assert "without an 'if __name__ == \"__main__\":' guard" in done.stderr and done.stderr.count("trains without") == 1
    assert "spawn" not in done.stdout and "forkserver" not in done.stdout and " failed (" not in done.stderr, (done.stdout, done.stderr)


def test_a_spawn_candidate_given_in_a_script_without_a_main_guard_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("autotune.autoloader._setup.unguarded_main", lambda: "/home/me/train.py")
    spawn = {"backend": "user", "num_workers": 1, "multiprocessing_context": "spawn"}
    with pytest.raises(UserError, match=r"candidates\[1\] starts spawn workers, but /home/me/train.py trains without an 'if __name__"):
        AutoLoader(Numbered(16), batch_size=4, collate_fn=collate, device="cpu", config=None, storage=None, candidates=[CANDIDATES[0], spawn])
