"""What the YAML says the search did: the configs it measured, how many it sampled, and what found the winner."""

from __future__ import annotations

import optuna
import pytest

from autotune.study.result import search_account
from autotune.tuning.write import searched_line

_DIST = {"num_workers": optuna.distributions.IntDistribution(0, 8)}


def _add(study: optuna.Study, workers: int, value: float | None, *, role: str | None = None, outcome: str = "complete",
         state: optuna.trial.TrialState = optuna.trial.TrialState.COMPLETE, windows: dict[int, float] | None = None) -> None:
    attrs = {"config": f"torch b=8 workers={workers}", "outcome": outcome, **({"role": role} if role else {})}
    study.add_trial(optuna.trial.create_trial(params={"num_workers": workers}, distributions=_DIST, value=value,
                                              state=state, user_attrs=attrs, intermediate_values=windows))


@pytest.fixture
def study() -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    s = optuna.create_study(direction="maximize")
    _add(s, 0, 100.0, role="defaults")
    _add(s, 2, 300.0, role="heuristic")
    _add(s, 3, 250.0)  # sampled
    _add(s, 5, None, outcome="pruned", state=optuna.trial.TrialState.PRUNED, windows={0: 240.0, 1: 200.0})  # sampled, cut: measured still
    _add(s, 7, None, outcome="crash", state=optuna.trial.TrialState.FAIL)  # sampled, crashed before a window: nothing measured
    # sampled, over a budget before a window: only the 0.0 that steers the sampler away
    _add(s, 4, None, outcome="timeout", state=optuna.trial.TrialState.FAIL, windows={0: 0.0})
    _add(s, 3, 250.0, outcome="repeat")  # the sampler drew trial 2's config again: not measured
    _add(s, 6, None, outcome="waiting", state=optuna.trial.TrialState.WAITING)  # queued, the budget ran out
    _add(s, 8, None, outcome="predicted-oom", state=optuna.trial.TrialState.FAIL)  # left out before it started
    s.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, user_attrs={"outcome": "interrupted"}))  # stopped as made
    return s


def test_a_start_that_wins_is_named_and_repeats_and_queued_trials_are_not_counted(study):
    heuristic = study.trials[1]
    assert search_account(study, heuristic) == {"configs_measured": 4, "sampled_measured": 2, "winner_from": "heuristic"}
    assert searched_line(search_account(study, heuristic)) == (
        "measured 4 configs, 2 of them sampled; the winner is a starting point (the torch cores heuristic)")


def test_a_sampled_winner_is_the_search_s(study):
    account = search_account(study, study.trials[2])
    assert account["winner_from"] == "search"
    assert searched_line(account).endswith("the winner was sampled by the search")


def test_a_config_measured_as_a_start_and_sampled_again_counts_once_as_sampled():
    """The sampler re-drawing a start's config measures it again (a warm start's neighbour): one config, and it
    was reached by the search too."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    s = optuna.create_study(direction="maximize")
    _add(s, 2, 300.0, role="heuristic")
    _add(s, 2, 310.0)
    assert search_account(s, s.trials[0]) == {"configs_measured": 1, "sampled_measured": 1, "winner_from": "heuristic"}


def test_a_yaml_written_before_the_account_gets_no_line():
    assert searched_line({"trials": 4}) == ""
