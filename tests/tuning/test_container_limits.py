"""Inside a container: Docker's 64 MiB ``/dev/shm``. The run tunes within it instead of refusing, and the config it
hands over fits: the configs whose workers would pass more than it holds have them hand over smaller batches, joined
in the main process (``worker_batch``), over an image folder as over the user's own Dataset."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.cli import main
from autotune.config import fingerprint
from autotune.config.files import load_config
from autotune.loaders.memory import estimate
from autotune.trials.guard import _budgets

FAST = ["--window", "0.2", "--windows", "2", "--warmup-batches", "1", "--no-report", "--quiet", "--confirm-top", "0", "--device", "cpu"]


@pytest.fixture
def docker_shm(monkeypatch: pytest.MonkeyPatch) -> float:
    """/dev/shm as Docker mounts it by default: 64 MiB, all free."""
    monkeypatch.setattr(fingerprint, "shm_bytes", lambda: 64 * 2**20)
    monkeypatch.setattr(_budgets, "shm_free_mib", lambda path=_budgets.SHM_PATH: 64.0)
    return 64.0


@pytest.fixture(scope="module")
def batch_64_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """96 small JPEGs: enough for a batch of 64, whose float32 crops (37 MiB) a worker passes through /dev/shm."""
    from autotune.dataset.synth import synthesize

    return synthesize(tmp_path_factory.mktemp("b64") / "train", images=96, classes=3, min_side=64, max_side=96, workers=1)


@pytest.mark.slow
def test_a_64_mib_shm_is_tuned_within_not_refused(workdir: Path, batch_64_set: Path, docker_shm: float) -> None:
    import optuna

    from autotune.dataset.scan import scan
    from autotune.study.evidence import trial_attrs

    assert main(["run", "--dataset", str(batch_64_set), "--space", "cpu", "--batch-size", "64", "--n-trials", "5", "--seed", "0", *FAST]) == 0
    cfg = load_config("autotune.yaml")
    need = estimate(cfg.loader, scan(batch_64_set), "imagenet-train", "cpu")["shm_mib"]
    assert need <= _budgets.SHM_FRACTION * docker_shm  # what it hands over fits the container
    study = optuna.load_study(study_name=None, storage="sqlite:///autotune.db")
    attrs = [trial_attrs(t) for t in study.trials]
    assert not [a for a in attrs if a.get("outcome") == "shm"], attrs  # no config left out for /dev/shm
    heuristic = next(a for a in attrs if a.get("role") == "heuristic")  # 2 workers x 2 batches of 64 and the loop's: 184 MiB predicted
    assert heuristic["outcome"] == "complete" and 1 <= heuristic["loader"]["worker_batch"] < 64 and "worker-batch=" in heuristic["config"], heuristic


def test_a_space_whose_every_config_starts_workers_is_still_refused(workdir: Path, tiny_dataset: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """No config of it could run, not even with each worker handing over one sample at a time: one line naming
    /dev/shm and the fix, before any trial."""
    monkeypatch.setattr(fingerprint, "shm_bytes", lambda: 2**20)
    monkeypatch.setattr(_budgets, "shm_free_mib", lambda path=_budgets.SHM_PATH: 1.0)
    Path("space.yaml").write_text("name: w\nparams:\n  backend: {choices: [torch]}\n  batch_size: {choices: [64]}\n  num_workers: {int: [1, 2]}\n")
    assert main(["run", "--dataset", str(tiny_dataset), "--space", "space.yaml", "--n-trials", "2", *FAST]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "/dev/shm" in err and "--shm-size" in err


USER_PIPELINE = '''\
import torch
from torch.utils.data import Dataset


class Crops(Dataset):
    def __len__(self):
        return 96

    def __getitem__(self, i):
        return torch.full((3, 8, 8), float(i)), i % 4


def make():
    return Crops()
'''


@pytest.mark.slow
def test_a_users_dataset_keeps_its_workers_in_a_64_mib_shm(workdir: Path, docker_shm: float) -> None:
    """The workers' whole batches (2 x 2 of 32 crops, as the memory model sizes them) do not fit: each worker hands
    over smaller ones, joined in the main process, instead of the run falling back to no workers."""
    import optuna

    from autotune.study.evidence import is_told, trial_attrs

    Path("pipe.py").write_text(USER_PIPELINE)
    assert main(["run", "--dataset", "pipe.py:make", "--batch-size", "32", "--n-trials", "3", "--seed", "0", *FAST]) == 0
    study = optuna.load_study(study_name=None, storage="sqlite:///autotune.db")
    with_workers = [trial_attrs(t) for t in study.trials if (trial_attrs(t).get("loader") or {}).get("num_workers", 0) > 0 and not is_told(t)]
    assert with_workers, [trial_attrs(t).get("config") for t in study.trials]
    assert all(a["outcome"] in ("complete", "pruned") for a in with_workers), with_workers  # none measured was left out for /dev/shm
    heuristic = next(a for a in with_workers if a.get("role") == "heuristic")  # 2 workers x 2 batches of 32 and the loop's: 92 MiB predicted
    assert 1 <= heuristic["loader"]["worker_batch"] < 32 and "worker-batch=" in heuristic["config"], heuristic
