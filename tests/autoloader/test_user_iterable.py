"""AutoLoader over the user's IterableDataset: each epoch runs one candidate's DataLoader over the whole stream, so an
epoch yields exactly what the dataset yields while exploration switches candidates between epochs."""

from __future__ import annotations

import collections
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
import torch
from torch.utils.data import IterableDataset, get_worker_info

from autotune import AutoLoader
from autotune.autoloader import Exploration
from autotune.config.files import load_config
from autotune.errors import UserError

N, BATCH = 200, 8

#: a warm-up batch, then every batch of the epoch measured; judged at each epoch's end
QUICK = Exploration(warmup_batches=1, measure_batches=1, check_batches=1, max_candidates=3, settle_wait=0.0)

CANDIDATES = [
    {"backend": "user", "num_workers": 0},
    {"backend": "user", "num_workers": 1, "prefetch_factor": 2},
    {"backend": "user", "num_workers": 2, "prefetch_factor": 4, "persistent_workers": True},
]


class Stream(IterableDataset):
    """The items 0..n-1, each worker its share (``get_worker_info``); item i is {"x": i as a 2-vector, "i": i}."""

    def __init__(self, n: int = N) -> None:
        self.n = n

    def __iter__(self) -> Iterator[dict]:
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, self.n, step):
            yield {"x": torch.full((2,), float(i)), "i": i}


class Sized(Stream):
    def __len__(self) -> int:
        return self.n


class Unsplit(Stream):
    """Every worker yields the whole stream: N workers would deliver each item N times."""

    def __iter__(self) -> Iterator[dict]:
        for i in range(self.n):
            yield {"x": torch.full((2,), float(i)), "i": i}


def collate(items: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.stack([d["x"] for d in items]), torch.tensor([d["i"] for d in items])


pytestmark = pytest.mark.usefixtures("in_tmp_then_no_mp_helpers")


def make(dataset: IterableDataset | None = None, **kw) -> AutoLoader:
    args = {"batch_size": BATCH, "collate_fn": collate, "device": "cpu", "config": "autotune.yaml", "storage": None, "seed": 3,
            "candidates": CANDIDATES, "exploration": QUICK, "budget_s": 600.0, "max_slowdown": 100.0, **kw}
    return AutoLoader(Stream() if dataset is None else dataset, **args)


def read_epoch(al: AutoLoader) -> tuple[list[int], list[dict]]:
    """The items of one epoch, and the candidate's params at each batch."""
    seen, used = [], []
    for x, i in al:
        assert torch.equal(x[:, 0], i.float())  # the user's collate output, untouched
        seen += i.tolist()
        used.append(dict(al._active.params) if al._active is not None else dict(al.settled.to_params()))
    return seen, used


def test_every_epoch_yields_exactly_the_stream_while_candidates_switch_between_epochs() -> None:
    al = make()
    workers = []
    try:
        for _ in range(5):
            seen, used = read_epoch(al)
            assert collections.Counter(seen) == collections.Counter(range(N))  # no repeat, nothing lost
            assert all(u == used[0] for u in used)  # one candidate the whole epoch
            workers.append(used[0].get("num_workers", 0))
    finally:
        al.close()
    assert workers[:3] == [0, 1, 2] and workers[3] == workers[4]  # three candidates, one an epoch, then the winner
    switches = [h for h in al.history if h["action"] == "switch"]
    assert len({h["config"] for h in switches}) == 3 and all(h["batch"] in (0, N // BATCH, -(-N // (2 * BATCH)) * 2) for h in al.history)
    assert al.settled is not None and al.history[-1]["action"] == "settle"


def test_an_unsplit_stream_is_refused_in_one_line_before_tuning() -> None:
    with pytest.raises(UserError) as e:
        make(Unsplit(), storage="sqlite:///autotune.db")
    msg = str(e.value)
    assert len(msg.splitlines()) == 1
    assert msg.startswith("the IterableDataset given (Unsplit) has workers that all yield the same items (worker 0 and 1 of 2 began alike)")
    assert "torch.utils.data.get_worker_info()" in msg
    assert not Path("autotune.db").exists() and not Path("autotune.yaml").exists()  # nothing tuned


def test_the_settled_config_is_written_and_a_second_run_reads_it() -> None:
    first = make()
    for _ in range(4):
        read_epoch(first)
    first.close()
    assert not first.exploring
    cfg = load_config("autotune.yaml")
    assert cfg.loader.backend == "user" and cfg.loader.describe() == first.settled.describe()
    assert cfg.result["tuned_by"].startswith("AutoLoader")
    second = make(candidates=[])
    try:
        assert not second.exploring and second.source is None  # settled from the YAML: no study
        assert second.settled.describe() == first.settled.describe()
        for _ in range(2):
            seen, _ = read_epoch(second)
            assert sorted(seen) == list(range(N))
    finally:
        second.close()


@pytest.mark.parametrize("how", ["close", "dropped"])
def test_a_loop_left_early_leaves_no_trial_running(how: str) -> None:
    import gc

    al = make(storage="sqlite:///autotune.db")
    name = al.source.study.study_name
    for step, _batch in enumerate(al):
        if step == 2:
            break
    if how == "close":
        al.close()
    else:
        del al, _batch
        gc.collect()
    trials = optuna.load_study(study_name=name, storage="sqlite:///autotune.db").trials
    assert trials and not [t for t in trials if t.state in (optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING)]
    assert trials[0].state == optuna.trial.TrialState.FAIL and trials[0].user_attrs.get("outcome") == "interrupted"


def test_an_epoch_left_early_is_judged_and_the_next_epoch_is_whole() -> None:
    al = make()
    try:
        for step, _batch in enumerate(al):
            if step == 4:
                break
        seen, used = read_epoch(al)  # the next candidate, from the stream's start
        assert sorted(seen) == list(range(N)) and used[0].get("num_workers") == 1
        assert al.history[1]["epoch"] == 1 and al.history[1]["batch"] == 0  # switched as the next epoch began
    finally:
        al.close()


class FailsInWorkers(Stream):
    """Raises at item ``at`` in a DataLoader worker (a crash of the candidates with workers); whole in this process."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.parent = at, os.getpid()

    def __iter__(self) -> Iterator[dict]:
        for item in super().__iter__():
            if item["i"] >= self.at and os.getpid() != self.parent:
                raise ValueError(f"item {item['i']} cannot be read")
            yield item


@pytest.mark.parametrize("at", [0, 100])
def test_a_failing_candidate_is_replaced_before_its_first_batch_or_its_error_ends_the_epoch(at: int) -> None:
    """Failing before its first batch, the candidate is replaced and the epoch is whole; failing mid-stream, its
    error reaches the loop (a new loader would start the stream again) and the next epoch runs the next candidate."""
    al = make(FailsInWorkers(at), candidates=[CANDIDATES[1], CANDIDATES[0]], exploration=dataclasses.replace(QUICK, max_candidates=2))
    try:
        if at:
            seen = []
            with pytest.raises(Exception, match="item 10[0-9] cannot be read"):
                for _, i in al:
                    seen += i.tolist()
            assert len(seen) == len(set(seen)) and seen == list(range(len(seen)))  # what was delivered, once each
        seen, used = read_epoch(al)
        assert sorted(seen) == list(range(N)) and all(u.get("num_workers", 0) == 0 for u in used)
        failed, judged = al.history[1], al.history[2]
        assert (failed["action"], failed["reason"], failed["epoch"], failed["batch"] > 0) == ("switch", "failed", 0, bool(at))
        # the next candidate is judged over its own whole epoch, not over what the failed one read
        assert (judged["action"], judged["epoch"], judged["batch"]) == ("settle", 1 if at else 0, N // BATCH)
    finally:
        al.close()


def test_len_is_dataloaders_and_shuffle_is_the_streams_own() -> None:
    al = make(config=None, budget_s=0)
    with pytest.raises(TypeError, match="has no len"):
        len(al)
    assert sorted(read_epoch(al)[0]) == list(range(N))
    al.close()
    sized = make(Sized(), config=None, budget_s=0)
    assert len(sized) == -(-N // BATCH) == len(torch.utils.data.DataLoader(Sized(), batch_size=BATCH))
    sized.close()
    with pytest.raises(UserError, match=r"^shuffle=True over an IterableDataset \(.*Stream\): its order is the stream's own") as e:
        make(shuffle=True)
    assert len(str(e.value).splitlines()) == 1
