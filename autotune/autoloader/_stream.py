"""Whole epochs: a short epoch's end (counted in its candidate's score), and the user's IterableDataset, whose
candidates switch only between epochs.

A DataLoader over a stream has no sampler that could start it where another loader stopped: each worker runs the
dataset's ``__iter__`` from its start, and the items the workers took wait in their queues. A switch mid-epoch would
either start the stream again (items delivered twice) or drop what the old workers held (items lost). So while
exploring, each epoch (each ``iter()``) runs one candidate's loader from the stream's start to its end, every batch
it takes is delivered, and the candidate is judged when the epoch ends; the next one starts with the next epoch. An
epoch yields exactly what the dataset yields (with ``drop_last``, less each worker's own last partial batch, as
DataLoader has it).

The score is a map-style candidate's: the loop's time per sample after the warm-up, here over the rest of the
epoch and its end. When an epoch is too short for a warm-up and a check (or the loop leaves it as early), the whole
epoch is scored, its first batch and its end included and the building of the loader left out, as for a short
map-style epoch. A loop that leaves an epoch early has its candidate judged on what it read when the next epoch
starts. A candidate that fails before its first batch is replaced at once (the stream starts again, nothing was
delivered); one that fails later is told as failed and its error reaches the loop, which gets the next candidate
with the next epoch: its stream cannot go on where the failed workers stopped.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from typing import Any

from autotune.autoloader._explore import Tally
from autotune.autoloader._plan import EpochPlan
from autotune.autoloader._setup import one_line
from autotune.config.schema import LoaderConfig
from autotune.loaders.backends import get_backend
from autotune.loaders.factory import build_from_dataset

logger = logging.getLogger(__package__)  # autotune.autoloader, not its private modules


def finish_epoch(act: Any, clock: Callable[[], float]) -> float:
    """Let the candidate's loader end its epoch, and return the seconds it took.

    A short epoch is scored whole, and its end belongs to it: DALI's reader still decodes the last partial batch
    that is dropped (on 300 images at batch 256, as long as the batch delivered: benchmarks/dali_tail.py), and a
    torch loader without persistent workers stops them. A loader built once pays that every epoch; the candidate,
    closed right after its last batch, would not, and its score would read up to twice what training then gets.
    """
    if act.it is None:
        return 0.0
    t0 = clock()
    try:
        next(act.it)  # the epoch's batches are all delivered: this ends it (a batch here would only be dropped)
    except StopIteration:
        pass
    except Exception as e:  # noqa: BLE001 - a failure past the last batch: the epoch was delivered; the close reports nothing either
        logger.debug("the end of the epoch failed: %s", one_line(e))
    return clock() - t0


@dataclasses.dataclass
class LeftEarly:
    """An epoch of a stream that the loop left before its end: judged when the next epoch starts."""

    whole: Tally
    batches: int


def stream_length(dataset: Any, batch_size: int, drop_last: bool) -> int:
    """``len()`` of an epoch over a stream, as DataLoader's: the dataset's ``len()`` in batches (a TypeError when it has none)."""
    from autotune.dataset.user import dataset_spec

    n = len(dataset_spec(dataset.root).dataset)  # TypeError: object of type ... has no len(), as DataLoader raises
    return n // batch_size if drop_last else -(-n // batch_size)


def _empty_plan(al: Any) -> EpochPlan:
    """The bookkeeping of a stream's epoch: its batches only (where a switch is recorded); no positions to track."""
    return EpochPlan(al._epoch, [], LoaderConfig.from_params(al._active.params).batch_size, al.drop_last)


def _judge(al: Any, plan: EpochPlan, whole: Tally, batches: int) -> None:
    """The candidate's verdict over the epoch it ran: after the warm-up, or the whole epoch when it was too short
    for a warm-up and a check. A candidate that read nothing (an ``iter()`` that was not read) goes on."""
    act = al._active
    short = batches - al.rules.warmup_batches < al.rules.check_batches
    if short or not act.tally.measured:
        if not whole.measured:
            return
        whole.start_s, whole.failed = act.tally.start_s, act.tally.failed
        act.tally = whole
        al._epoch_batches = batches
    al._check(plan, epoch_end=True)


def _fetch(al: Any, plan: EpochPlan, clock: Callable[[], float]) -> tuple[Any, int, float, float] | None:
    """The next batch of the stream's epoch, its samples, the seconds waited for it and of those the seconds spent
    building the loader; None at the stream's end. A candidate that fails before the epoch's first batch is
    replaced (the stream starts again in the next loader: nothing was delivered)."""
    attempts = 0
    while True:
        act = al._active
        t0 = clock()
        try:
            built, once = act.it is None, 0.0
            if built:
                cfg = LoaderConfig.from_params(act.params)
                act.loader = build_from_dataset(al._positions, cfg, pipeline=al.pipeline, device=al.device, seed=al.seed)
                persistent = get_backend(cfg.backend).starts_once(cfg)
                if persistent:  # its workers start once; without persistent workers, every epoch
                    act.it = iter(act.loader)
                once = clock() - t0
                if not persistent:
                    act.it = iter(act.loader)
            batch, count = next(act.it)
            wait = clock() - t0
            if built:
                act.tally.start_s = wait
            return batch, int(count.shape[0]), wait, once
        except StopIteration:
            return None
        except Exception as e:  # noqa: BLE001 - any failure of a candidate: a worker crash, a start method that cannot pickle
            if plan.batches:  # batches of this stream were delivered: a new loader would start it again
                _failed_mid_epoch(al, act, e, plan)
                raise
            attempts += 1
            if attempts > al.rules.max_candidates + 2:
                raise
            al._replace(act, e, plan)


def _failed_mid_epoch(al: Any, act: Any, error: BaseException, plan: EpochPlan) -> None:
    """A candidate failed after some of the epoch was delivered: told as failed, and the next candidate (or the
    winner) starts with the next epoch; the error goes on to the loop."""
    if not al.exploring or act.fallback:
        return
    msg = one_line(error)
    logger.warning("loader %s failed after %d batches of the epoch (%s): an IterableDataset's stream cannot go on where its workers "
                   "stopped, so the error reaches the loop; the next epoch runs the next candidate", LoaderConfig.from_params(act.params).describe(),
                   plan.batches, msg)
    act.tally.failed = act.tally.failed or msg
    al._check(plan)


def stream_epoch(al: Any, clock: Callable[[], float]) -> Iterator[Any]:
    """One epoch of the user's IterableDataset while ``al`` explores: one candidate's loader over the whole stream."""
    act = al._active
    if act.left is not None:  # the loop left the last epoch early: its candidate is judged on what it read
        left, act.left = act.left, None
        _judge(al, _empty_plan(al), left.whole, left.batches)
    if not al.exploring:  # judging settled it: the winner, built once
        if al._active is not None:
            al._close_loader(al._active)
            al._active = None
        yield from al._settled_epoch()
        return
    act = al._active
    al._close_loader(act)  # each epoch a fresh iter(): the stream starts at its beginning in every worker
    act.tally.rebuilt()
    plan = _empty_plan(al)
    token = al._epoch_token = object()  # an abandoned earlier iterator must not close this epoch's loader
    whole = Tally()  # every batch, the first one included and the building left out: the score of a short epoch
    ran = act  # the candidate whose loader this epoch reads (one that failed before its first batch is replaced)
    t_prev: float | None = None
    last: tuple[int, float, float, bool] = (0, 0.0, 0.0, False)  # samples, wait (less the building), building, measured
    ended = False
    try:
        while True:
            if al._epoch_token is not token:
                raise RuntimeError("this AutoLoader began another epoch (a second iter()) while this one was still read; "
                                   "read one epoch at a time while it explores")
            now = clock()
            act = al._active
            if t_prev is not None:
                whole.add(now - t_prev - last[2], last[0], last[1])
                if last[3]:
                    act.tally.add(now - t_prev - last[2], last[0], last[1])
            got = _fetch(al, plan, clock)
            act = ran = al._active  # a candidate that failed before the first batch was replaced
            if got is None:  # the stream's end: its cost (workers stopping) belongs to the epoch
                end = clock() - now
                whole.loop_s += end
                act.tally.loop_s += end if act.tally.measured else 0.0
                ended = True
                break
            batch, samples, wait, once = got
            act.tally.since_build += 1
            last = (samples, wait - once, once, al.exploring and act.tally.since_build > al.rules.warmup_batches)
            plan.batches += 1
            t_prev = now
            yield batch
        if al.exploring:
            _judge(al, plan, whole, plan.batches)
    finally:
        if al._epoch_token is token and al._active is not None:
            act = al._active
            al._close_loader(act)
            if not ended and al.exploring and plan.batches and act is ran:  # not after a failure mid-stream: then judged already
                act.left = LeftEarly(whole, plan.batches)
            if not al.exploring:
                al._active = None  # the next epoch runs the winner, built once
