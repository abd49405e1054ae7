"""The warnings at the end of a run that the run's own figures cannot show."""

from __future__ import annotations

import optuna

from autotune.config.schema import Config, LoaderConfig
from autotune.tuning.caveats import workers_failed_warnings

BOOM = "RuntimeError: worker init failed at /p/pipe.py:7"


def _study(trials: list[tuple[int, str | None]]) -> optuna.Study:
    """One trial per (num_workers, crash message); None: it completed."""
    study = optuna.create_study(direction="maximize")
    for workers, crash in trials:
        attrs = {"loader": {"backend": "user", "batch_size": 8, "num_workers": workers}, "outcome": "crash" if crash else "complete",
                 "config": f"user b=8 workers={workers}"}
        if crash:
            attrs["message"] = crash
        state = optuna.trial.TrialState.FAIL if crash else optuna.trial.TrialState.COMPLETE
        study.add_trial(optuna.trial.create_trial(state=state, value=None if crash else 100.0, user_attrs=attrs))
    return study


def _winner(workers: int) -> Config:
    return Config(loader=LoaderConfig.from_params({"backend": "user", "batch_size": 8, "num_workers": workers}))


def test_a_winner_without_workers_because_every_worker_crashed_alike_is_warned_of() -> None:
    """A worker_init_fn that raised: every config with workers crashed, the run exited 0 with num_workers 0, and only
    the trial lines said why."""
    (said,) = workers_failed_warnings(_winner(0), _study([(0, None), (2, BOOM), (1, BOOM), (2, BOOM)]))
    assert said == (f"every config with workers crashed alike (3 trials): {BOOM}; the YAML loads in the main process (num_workers 0): "
                    "fix that and tune again to load in parallel")
    assert not workers_failed_warnings(_winner(0), _study([(0, None), (2, BOOM), (1, None)]))  # workers could: 0 won on speed
    assert not workers_failed_warnings(_winner(0), _study([(0, None), (2, BOOM), (1, "MemoryError")]))  # not alike: no one cause
    assert not workers_failed_warnings(_winner(0), _study([(0, None), (2, BOOM)]))  # one crash says little
    assert not workers_failed_warnings(_winner(2), _study([(2, None), (1, BOOM), (3, BOOM)]))
    stopped = _study([(0, None), (2, BOOM), (1, BOOM)])  # and the budget stopped a third config with workers
    stopped.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, user_attrs={
        "loader": {"backend": "user", "batch_size": 8, "num_workers": 3}, "outcome": "interrupted", "config": "user b=8 workers=3"}))
    assert len(workers_failed_warnings(_winner(0), stopped)) == 1  # it says nothing of workers: still warned


def test_a_config_that_crashed_before_a_window_is_not_counted_as_measured() -> None:
    """The last line said 'measured 7 configs, 5 of them sampled' where 6 had crashed before their first window."""
    from autotune.study.result import search_account

    study = _study([(0, None), (2, BOOM), (1, BOOM)])
    assert search_account(study, study.trials[0])["configs_measured"] == 1
