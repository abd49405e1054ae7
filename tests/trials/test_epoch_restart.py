"""Workers that do not persist start again every epoch: a trial's rate pays that start once an epoch, as training
does. Measured inside one epoch, a forkserver config on a 2-core machine read 756 samples/s in its trial and 311-363
in fresh processes over whole epochs, half of what a worker per core gave."""

from __future__ import annotations

import pytest

from autotune.config.schema import LoaderConfig
from autotune.dataset.scan import scan
from autotune.loaders.backends import get_backend
from autotune.outcomes import Outcome
from autotune.trials.one_rank import per_epoch_rate
from autotune.trials.runner import run_trial
from autotune.trials.spec import TrialSpec


def test_the_rate_over_whole_epochs_pays_one_start_an_epoch() -> None:
    assert per_epoch_rate(1000.0, 1.0, 1000) == pytest.approx(500.0)
    assert per_epoch_rate(1000.0, 0.0, 1000) == pytest.approx(1000.0)
    assert per_epoch_rate(1000.0, 1.0, 100_000) == pytest.approx(1000.0 / 1.01)


@pytest.mark.parametrize(("params", "restarts"), [
    ({"backend": "torch", "batch_size": 8, "num_workers": 1}, True),
    ({"backend": "torch", "batch_size": 8, "num_workers": 1, "persistent_workers": True}, False),
    ({"backend": "torch", "batch_size": 8, "num_workers": 0}, False),
    ({"backend": "dali", "batch_size": 8, "dali_device": "cpu", "num_threads": 1}, False),
])
def test_only_workers_that_do_not_persist_restart_each_epoch(params, restarts) -> None:
    loader = LoaderConfig.from_params(params)
    assert get_backend(loader.backend).restarts_each_epoch(loader) is restarts


def test_a_trial_of_workers_that_do_not_persist_scores_whole_epochs(tiny_dataset) -> None:
    ds = scan(tiny_dataset)

    def trial(**torch_params):
        loader = LoaderConfig.from_params({"backend": "torch", "batch_size": 8, **torch_params})
        spec = TrialSpec(dataset=ds, loader=loader, pipeline="imagenet-eval", device="cpu", warmup_batches=1, window_s=0.2, windows=2)
        r = run_trial(spec, timeout_s=60)
        assert r.outcome is Outcome.COMPLETE, r.message
        return r

    fresh = trial(num_workers=1)
    assert fresh.extra["epoch_restart_s"] > 0
    assert fresh.samples_per_s == pytest.approx(per_epoch_rate(fresh.extra["rate_within_epoch"], fresh.extra["epoch_restart_s"], 24), rel=1e-3)
    assert fresh.samples_per_s < fresh.extra["rate_within_epoch"]
    kept = trial(num_workers=1, persistent_workers=True)
    assert "rate_within_epoch" not in kept.extra and "epoch_restart_s" not in kept.extra
