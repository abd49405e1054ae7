"""``AutoLoader``: the loader that finds its own configuration inside the user's training loop.

Two modes. *Settled*: a config that matches this machine was found (or exploration has ended): the tuned
loader, built once, exactly what :func:`autotune.build_loader` builds. *Exploring*: each epoch follows one
permutation (:mod:`._plan`); the current candidate is a loader over the part of the epoch not yet delivered;
at check points (:mod:`._explore`) rank 0 judges it, asks the study for the next one (:mod:`._source`) and
every rank switches at the same batch (:mod:`._agree`). A candidate that fails is replaced before its batch is
lost: the loop never sees an error from exploration.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import logging
import os
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any

from autotune.autoloader._agree import Agreement
from autotune.autoloader._explore import BUDGET, CONTINUE, Best, Exploration, Explorer, Tally, loop_rate
from autotune.autoloader._plan import EpochPlan
from autotune.autoloader._setup import one_line, undecodable
from autotune.autoloader._stream import finish_epoch, stream_epoch, stream_length
from autotune.autoloader._writes import Background, write_yaml
from autotune.config.schema import DEFAULT_BACKEND, LoaderConfig
from autotune.errors import UserError
from autotune.loaders.backends import backend_for, get_backend
from autotune.loaders.factory import build_from_dataset

logger = logging.getLogger(__package__)  # autotune.autoloader, not its private modules

#: why exploration settled when training ended before it did (close(), the loader dropped, the interpreter's exit)
CUT_SHORT = "training ended while exploring"

#: the config every fallback ends at: the torch defaults, which need no worker, no thread and no GPU decoder
SAFE = {"backend": DEFAULT_BACKEND, "num_workers": 0}

#: epochs a candidate's loader reads ahead at most (see AutoLoader._reads)
_READ_AHEAD_EPOCHS = 4

#: what a candidate's batches are timed by, read at each call (a test gives it made-up step times, so that a score
#: does not move with the machine's load)
_clock = time.perf_counter


@dataclasses.dataclass
class _Active:
    """The candidate the loop is on (``number`` None: not a study trial) and the loader built for it."""

    number: int | None
    params: dict[str, Any]
    tally: Tally = dataclasses.field(default_factory=Tally)
    loader: Any = None
    it: Iterator | None = None
    fallback: bool = False  # this rank runs the fallback config until the next check point
    through: int = 0  # the last epoch whose order the loader reads (it may run on past the current epoch)
    resume: int | None = None  # the epoch the loader goes on with, without a rebuild (the last one ended in full)
    rank_local: bool = False  # the next build is this rank's alone (a fallback): it reads through the agreed `through`
    left: Any = None  # an IterableDataset's epoch the loop left early, its candidate not yet judged (see _stream.LeftEarly)


class AutoLoader:
    """A loader that tunes itself while the model trains; the same batch contract as :func:`autotune.build_loader`.

    ```python
    loader = autotune.AutoLoader("/data/train", device="cuda", config="autotune.yaml")
    for epoch in range(epochs):
        for images, labels in loader:
            train_step(images, labels)
    ```

    If ``config`` exists and matches this machine, the dataset, the pipeline and the batch size, it builds that
    loader and explores nothing. Otherwise it explores during the first ``budget_s`` seconds of training,
    settles on the fastest candidate and writes ``config`` (atomically), so that the next run starts settled.

    Args:
        path: the dataset folder (one sub-folder per class), or your own torch Dataset (its items batched by ``collate_fn``,
            in order unless ``shuffle``; ``drop_last`` drops an epoch's last partial batch; ``space`` ``user``). An
            IterableDataset is read as it yields (``shuffle`` left out), its candidates switched only between epochs.
        device: where batches are delivered; default ``cuda`` (this process's current GPU) when there is one.
        config: the YAML to read and, after exploring, to write; None reads and writes nothing.
        batch_size: an int fixes it (changing it mid-training changes the optimisation); a list lets exploration
            choose among those; None takes the matching YAML's, else 256 (at most the samples per rank).
        budget_s: seconds of training after which exploration stops (default ``exploration.budget_s``, three
            minutes).
        max_slowdown: a candidate slower than the best so far by more than this factor is abandoned (default
            ``exploration.max_slowdown``, 1.5).
        pipeline: the preset (``imagenet-train``: augmentations stay those of the preset).
        space: the search space, a name under ``search_spaces/`` or a YAML file.
        candidates: loader parameters to try first (flat names, as in a search space).
        seed: fixes the epoch permutations and the sampler; default random (agreed by all ranks).
        storage: the Optuna storage of the study (default the one ``autotune run`` uses); None keeps it in memory.
        study_name: default ``<dataset>-<key>-autoloader-<time>`` (the key: a hash of the machine, the dataset and the settings).
        with_indices: yield ``(images, labels, indices)``: ``indices`` are the dataset positions of the batch
            (int64, on the device; in the order of ``autotune``'s scan, i.e. ``ImageFolder``'s).
        exploration: finer exploration settings (warm-up and measured batches, check points, candidates); its
            ``budget_s`` and ``max_slowdown`` count unless given here too (set in both places, the Exploration's
            not at its default, to two values is an error).

    Under DDP (``torch.distributed`` initialised) every rank builds its own ``AutoLoader`` with the same
    arguments; rank 0 decides, all ranks switch at the same batch, and a candidate's score is the slowest
    rank's. Every rank gets ``floor(samples / world_size)`` samples an epoch.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | Any,
        *,
        device: str | None = None,
        config: str | os.PathLike[str] | None = "autotune.yaml",
        batch_size: int | Sequence[int] | None = None,
        budget_s: float | None = None,
        max_slowdown: float | None = None,
        pipeline: str = "imagenet-train",
        space: str = "default",
        candidates: Sequence[dict[str, Any]] = (),
        seed: int | None = None,
        storage: str | None = "sqlite:///autotune.db",
        study_name: str | None = None,
        with_indices: bool = False,
        exploration: Exploration | None = None,
        collate_fn: Callable[..., Any] | None = None,
        shuffle: bool | None = None,
        drop_last: bool | None = None,
    ) -> None:
        from autotune.autoloader._setup import agreed, check_arguments, check_candidates, check_writable, resolve, rules_of, start_source, user_source

        self.shuffle, self._user = shuffle is not False, path is not None and not isinstance(path, (str, os.PathLike))  # None: the path missing, told so
        if self._user:  # the user's own Dataset: the kind user, its DataLoader over the part of the epoch not yet delivered
            path, pipeline, space, self.shuffle = user_source(path, collate_fn=collate_fn, drop_last=drop_last, space=space, with_indices=with_indices,
                                                              shuffle=shuffle)
        self._safe = {**SAFE, "backend": "user"} if self._user else SAFE
        candidates = check_arguments(path=path, device=device, config=config, pipeline=pipeline, space=space, candidates=candidates,
                                     storage=storage, study_name=study_name, with_indices=with_indices, exploration=exploration)
        self.rules = rules_of(exploration, budget_s=budget_s, max_slowdown=max_slowdown)
        self.comm = Agreement.detect()
        self.config_path = None if config is None else str(config)
        self.with_indices = with_indices
        self.history: list[dict[str, Any]] = []  # one entry per switch: epoch, batch, trial, config, reason
        self._epoch_batches = 0  # batches in an epoch too short to measure in, when candidates were scored over whole ones
        s = resolve(self.comm, self.config_path, path, device=device, batch_size=batch_size, pipeline=pipeline, space=space, seed=seed)
        if s.settled is None:
            check_candidates(candidates, s)  # every rank, alike: found before training starts
        self.dataset, self.pipeline, self.drop_last, self.device, self.seed = s.dataset, s.pipeline, s.drop_last, s.device, s.seed
        self.batch_size, self._stream = s.batch_size, bool(getattr(s.dataset, "iterable", False))  # an IterableDataset: see _stream
        self._positions = s.dataset if self._user else dataclasses.replace(s.dataset, labels=tuple(range(len(s.dataset))))  # labels = positions
        self._lut: dict[Any, Any] = {}
        self._epoch = 0
        self._plain: Any = None
        self._candidates: dict[int, Any] = {}
        self._epoch_token: object | None = None
        self.written: Any = None  # the Config written after exploring (rank 0; once close() returned)
        self._writing: Future | None = None  # the YAML's write, on the worker thread: its Config once done
        self._background = Background()  # rank 0's study and YAML writes, off the loop
        self._at_exit: Callable[[], Any] | None = None  # close() at interpreter exit, while exploring
        self.source: Any = None
        self.explorer: Explorer | None = None
        if s.settled is not None:
            self.settled: LoaderConfig | None = LoaderConfig.from_params(s.settled)
            self.batch_size = self.settled.batch_size
            self._active: _Active | None = None
            logger.info("%s matches this machine: %s, no exploration", self.config_path, self.settled.describe())
            return
        self.settled = None
        self._active = None
        check_writable(self.comm, self.config_path)  # found now, not after minutes of exploring; every rank raises it
        if self.rules.budget_s == 0:  # nothing to explore: the torch defaults, no study, nothing written
            self._apply({"action": "settle", "number": None, "params": {**self._safe, "batch_size": self.batch_size}, "reason": "budget_s is 0"}, None)
            return

        def start() -> dict[str, Any]:  # rank 0: open the study, ask for the first candidate
            self.source = start_source(self.comm, self.rules, s, candidates=candidates, storage=storage, study_name=study_name)
            self.explorer = Explorer(self.rules, time.monotonic())
            if self.source.carried_on and s.carry_on is not None:  # exploration goes on where training cut it short
                self.explorer = Explorer(self.rules, time.monotonic() - s.carry_on["exploration_s"])  # the budget counts what was spent
                self.explorer.tried = s.carry_on["candidates_tried"]
                found = self.source.best_measured()
                if found is not None:
                    self.explorer.best = Best(found[0], found[1], 1.0 / found[2])
            return self._next_decision("start", 0.0, "first candidate")

        self._apply(agreed(self.comm, start), None)
        # training that ends without close() (the three-line loop, Ctrl-C) still keeps what was measured
        ref = weakref.ref(self)

        def close_at_exit() -> None:
            loader = ref()
            if loader is not None:
                loader.close()

        self._at_exit = close_at_exit
        atexit.register(self._at_exit)

    # -- the batch contract ----------------------------------------------------------------------------------
    @property
    def short_epochs(self) -> bool:
        """Candidates were scored over whole epochs (see ``_short_epoch``)."""
        return self._epoch_batches > 0

    @property
    def exploring(self) -> bool:
        return self.settled is None

    def __len__(self) -> int:
        """Batches an epoch at the current batch size: while exploring, the candidate in use (a switch mid-epoch to
        another size changes the count of that epoch)."""
        per_rank = len(self.dataset) // self.comm.world if self.comm.world > 1 else len(self.dataset)
        b = LoaderConfig.from_params(self._active.params).batch_size if self.exploring and self._active is not None else self.batch_size
        if self._stream:  # as DataLoader's over a stream: from the dataset's len(), a TypeError when it has none
            return stream_length(self.dataset, b, self.drop_last)
        return per_rank // b if self.drop_last else -(-per_rank // b)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        self._epoch += 1
        if self.exploring:
            return stream_epoch(self, _clock) if self._stream else self._explore_epoch()
        if self._active is not None:  # settled while an earlier epoch's iterator was left unfinished: the winner now
            self._close_loader(self._active)
            self._active = None
        return self._settled_epoch()

    def _out(self, images: Any, positions: Any) -> Any:
        if self._user:  # the user's batch, as its collate_fn made it
            return images
        lut = self._lut.get(positions.device)
        if lut is None:
            import torch

            lut = self._lut[positions.device] = torch.as_tensor(self.dataset.labels, dtype=torch.int64).to(positions.device)
        labels = lut[positions]
        return (images, labels, positions) if self.with_indices else (images, labels)

    def close(self) -> None:
        """Release the current loader's workers, threads and device memory.

        Training that ends while the loader is still exploring keeps what was measured: rank 0 writes the YAML
        for the best candidate so far (if one completed), and the next run starts from it. Rank 0 stores results
        and writes the YAML on a worker thread, off the loop; close() waits for those writes (so does the
        interpreter's normal exit, when close() is never called). close() talks to no other rank (ranks may reach it
        at different times): after training that ended while exploring, ``settled`` is the winner on rank 0 only.
        """
        if self._active is not None:
            self._close_loader(self._active)
        if self._plain is not None:
            self._plain.close()
            self._plain = None
        if self.exploring and self.comm.leader and self.explorer is not None:
            best = self.explorer.best
            if best is None and self.config_path is not None:
                logger.warning("training ended before any candidate finished its measurement: %s not written; the next run explores again", self.config_path)
            # settled, the study's open trials are closed: the running candidate is interrupted, the queued ones taken off the queue
            safe = {"action": "settle", "number": None, "params": {**self._safe, "batch_size": self.batch_size},
                    "reason": f"{CUT_SHORT}; no candidate completed"}
            self._apply({"action": "settle", "number": best.number, "params": best.params, "reason": CUT_SHORT} if best is not None else safe, None)
            self._active = None
        self._drain()  # the study's last results and the YAML are written when close() returns
        if self._at_exit is not None and not self.exploring:
            atexit.unregister(self._at_exit)
            self._at_exit = None

    def __del__(self) -> None:
        """A loader dropped while exploring (a loop left early, in a function that returned) ends its exploration as
        close() would: the candidate it ran is marked interrupted in the study, not left running."""
        try:
            if getattr(self, "settled", True) is None and getattr(self, "source", None) is not None:
                self.close()
        except Exception as e:  # noqa: BLE001 - nothing may escape a finalizer; the study then keeps the trial open
            logger.warning("ending exploration as the loader was dropped failed: %s", one_line(e))

    def __enter__(self) -> AutoLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- settled: the tuned loader, built once -----------------------------------------------------------------
    def _settled_epoch(self) -> Iterator[tuple[Any, ...]]:
        assert self.settled is not None
        if self._plain is None and self._user:
            from autotune.autoloader._setup import user_loader

            self._plain = user_loader(self.dataset, self.settled, device=self.device, seed=self.seed, rank=self.comm.rank, world=self.comm.world,
                                      shuffle=self.shuffle, drop_last=self.drop_last)
        if self._plain is None:
            ds = self._positions if self.with_indices else self.dataset
            self._plain = build_from_dataset(
                ds, self.settled, pipeline=self.pipeline, device=self.device, shard_id=self.comm.rank, num_shards=self.comm.world, seed=self.seed
            )
        if not self.with_indices:
            yield from self._plain
            return
        for images, positions in self._plain:
            yield self._out(images, positions)

    # -- exploring: one permutation, loaders over what is left of it -------------------------------------------
    def _explore_epoch(self) -> Iterator[tuple[Any, ...]]:
        act = self._active
        assert act is not None
        plan = EpochPlan.make(len(self.dataset), seed=self.seed, epoch=self._epoch, rank=self.comm.rank, world=self.comm.world,
                              batch_size=LoaderConfig.from_params(act.params).batch_size, drop_last=self.drop_last, shuffle=self.shuffle)
        if not (self.exploring and act.loader is not None and act.resume == self._epoch):
            self._close_loader(act)  # a loader that reads on into this epoch goes on: no rebuild, no second warm-up
            act.tally.rebuilt()  # every rank rebuilds here: the warm-up is not measured
        act.resume = None
        token = self._epoch_token = object()  # an abandoned earlier iterator must not close this epoch's loader
        clock = _clock
        t_prev: float | None = None
        last: tuple[int, float, float] | None = None  # (samples, wait, once: seconds left out) of the last batch when it is measured
        ended = False  # the epoch was delivered in full (not left early by the loop)
        try:
            while True:
                if self._epoch_token is not token:  # resumed after a later iter(): both would read the one shared plan
                    raise RuntimeError("this AutoLoader began another epoch (a second iter()) while this one was still read; "
                                       "read one epoch at a time while it explores")
                now = clock()
                act = self._active
                assert act is not None
                if t_prev is not None and last is not None:
                    act.tally.add(now - t_prev - last[2], last[0], last[1])
                b = LoaderConfig.from_params(act.params).batch_size
                short = self.exploring and self._short_epoch(plan, b)
                if short:
                    self._epoch_batches = plan.expected_batches(b)
                    whole = act.tally.measured >= self._epoch_batches  # an epoch's worth measured, in one or several epochs
                    if act.tally.measured and plan.done(b):
                        act.tally.loop_s += finish_epoch(act, _clock)
                    if act.tally.measured and (plan.done(b) or whole):  # judged at the epoch's end, or once a loop that
                        self._check(plan, epoch_end=whole)  # leaves each epoch early has run an epoch's worth of batches
                elif self.exploring and act.tally.check_due(self.rules):
                    self._check(plan)
                act = self._active  # a check may have switched or settled: the batch size is the new loader's
                assert act is not None
                b = LoaderConfig.from_params(act.params).batch_size
                if plan.done(b):
                    ended = True
                    break
                images, positions, wait, once = self._fetch(plan)
                act = self._active  # _fetch may have replaced a failed candidate: the batch is the active one's
                assert act is not None
                act.tally.since_build += 1
                short = self.exploring and self._short_epoch(plan, b)
                measured = short or (self.exploring and act.tally.since_build > self.rules.warmup_batches)
                once = once if short else 0.0  # a whole short epoch is scored, less what a loader built once pays once
                last = (int(positions.shape[0]), wait - once, once) if measured else None
                plan.advance(int(positions.shape[0]))
                t_prev = now
                yield self._out(images, positions)
        finally:
            if self._epoch_token is token:
                act = self._active
                # delivered in full: the loop asked past the last batch, or stopped right after it (zip(range(len(loader)), loader))
                ended = ended or (act is not None and plan.done(LoaderConfig.from_params(act.params).batch_size))
                if act is not None and ended and self.exploring and act.it is not None and act.through > plan.epoch:
                    act.resume = plan.epoch + 1  # its loader reads on into the next epoch's order
                elif act is not None:
                    self._close_loader(act)
                if not self.exploring:
                    self._active = None  # the next epoch runs the winner, built once

    def _short_epoch(self, plan: EpochPlan, batch_size: int) -> bool:
        """An epoch too short for a warm-up and a check: candidates are scored over whole epochs, first batch and
        end included, the building of the loader left out (see ``_fetch`` and ``_finish_epoch``).

        Each candidate's loader is rebuilt at every epoch; when an epoch holds fewer than ``warmup_batches +
        check_batches`` batches, the batches after the warm-up are few and unrepresentative (the loop waits on
        the start of each epoch), so no candidate would finish its measurement and the figure written would be
        well above what the loop gets. Then each candidate runs one whole epoch, every batch measured.
        """
        return plan.expected_batches(batch_size) - self.rules.warmup_batches < self.rules.check_batches

    def _reads(self, plan: EpochPlan, act: _Active) -> list[int]:
        """The positions a candidate's loader reads: the rest of this epoch and, while exploring, the next epochs' orders.

        A candidate measured across an epoch's end would otherwise be rebuilt there and pay its start (workers,
        pipeline, queues) and its warm-up twice. It reads on into the following epochs until it has enough batches
        for a warm-up and a measurement, each epoch's part cut to whole batches, so that no batch holds samples of
        two epochs and each epoch still delivers its own order exactly once. Not when epochs are too short to
        measure in (each candidate is then scored over a whole epoch, its first batch included), nor when a batch would
        straddle two epochs (the last, partial batch of an epoch is delivered, not dropped).
        """
        rest = plan.remaining()
        agreed_through = act.through if act.rank_local else None
        act.rank_local = False
        act.through = plan.epoch
        b = LoaderConfig.from_params(act.params).batch_size
        if not self.exploring or self._short_epoch(plan, b) or (not self.drop_last and (len(rest) % b or len(plan.indices) % b)):
            return rest
        reads = rest[: len(rest) // b * b]
        r = self.rules
        want = r.warmup_batches + -(-r.measure_batches // r.check_batches) * r.check_batches  # through the check that judges it
        while (len(reads) // b < want if agreed_through is None else act.through < agreed_through) and act.through < plan.epoch + _READ_AHEAD_EPOCHS:
            act.through += 1
            nxt = EpochPlan.make(len(self.dataset), seed=self.seed, epoch=act.through, rank=self.comm.rank, world=self.comm.world, batch_size=b,
                                 drop_last=self.drop_last, shuffle=self.shuffle)
            reads += nxt.indices[: len(nxt.indices) // b * b]
        return reads

    def _fetch(self, plan: EpochPlan) -> tuple[Any, Any, float, float]:
        """The next batch of the current candidate, the seconds waited for it, and of those the seconds spent
        building its loader (with ``iter()`` where persistent workers start there): what the loader training keeps,
        built once, pays once, not every epoch. A candidate that fails is replaced, the batch is not lost."""
        attempts = 0
        while True:
            act = self._active
            assert act is not None
            t0 = _clock()
            try:
                built = act.it is None
                once = 0.0
                if built:
                    cfg = LoaderConfig.from_params(act.params)
                    act.loader = build_from_dataset(
                        self._positions, cfg, pipeline=self.pipeline, device=self.device, seed=self.seed,
                        indices=self._reads(plan, act),
                    )
                    persistent = get_backend(cfg.backend).starts_once(cfg)
                    if persistent:  # its workers start once; without persistent workers, every epoch
                        act.it = iter(act.loader)
                    once = _clock() - t0
                    if not persistent:
                        act.it = iter(act.loader)
                assert act.it is not None  # built above, or kept from an earlier batch
                images, positions = next(act.it)
                wait = _clock() - t0
                if built:
                    act.tally.start_s = wait  # the build and its first batch: what switching to it costs
                return images, positions, wait, once
            except StopIteration:
                error: BaseException = RuntimeError(f"the loader ended with {plan.left()} samples of the epoch left")
            except Exception as e:  # noqa: BLE001 - any failure of a candidate: OOM, a worker crash, a bad option
                error = e
            attempts += 1
            if attempts > self.rules.max_candidates + 2:
                raise error
            self._replace(act, error, plan)

    def _replace(self, act: _Active, error: BaseException, plan: EpochPlan) -> None:
        """Drop a failed loader: decide at once in one process; under DDP run the fallback to the next check point.
        A file that torch's own decoding cannot read fails every loader: one line naming it, not a candidate's failure."""
        bad = undecodable(error) if backend_for(act.params).decodes_with_open_rgb else None
        if bad is not None:  # a dozen candidates failed on it in turn, then a BadImageError traceback reached the loop
            self._close_loader(act)
            raise UserError(f"{bad} cannot be decoded, and every loader reads it: remove or replace it, then train again "
                            "('autotune run --dataset DIR' lists every such file)") from error
        msg = one_line(error)
        logger.warning("loader %s failed (%s): replacing it", LoaderConfig.from_params(act.params).describe(), msg)
        self._close_loader(act)
        act.rank_local = True  # under DDP only this rank rebuilds: it must read as far as the others
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()  # what an out-of-memory candidate left cached goes back before the next one
        if act.fallback or not self.exploring:
            if all(act.params.get(k, DEFAULT_BACKEND if k == "backend" else None) == v for k, v in self._safe.items()):
                raise error  # even the torch defaults fail: a real problem (the data), not a candidate's
            act.params = {**self._safe, "batch_size": LoaderConfig.from_params(act.params).batch_size}
            act.fallback = True
            return
        act.tally.failed = act.tally.failed or msg
        if self.comm.world == 1:
            self._check(plan)
            return
        batch = LoaderConfig.from_params(act.params).batch_size  # every rank keeps it: the plan's steps stay the same on all
        fallback = self.explorer.best.params if self.explorer and self.explorer.best else None
        act.params = {**(fallback or self._safe), "batch_size": batch}
        act.fallback = True

    def _close_loader(self, act: _Active) -> None:
        act.it = None
        if act.loader is not None:
            try:
                act.loader.close()
            except Exception as e:  # noqa: BLE001 - closing a broken loader
                logger.debug("closing a loader failed: %s", e)
            act.loader = None

    # -- check points: rank 0 judges, every rank applies -------------------------------------------------------
    def _check(self, plan: EpochPlan, epoch_end: bool = False) -> None:
        """A check point; ``epoch_end``: the candidate has been measured over a whole (short) epoch."""
        act = self._active
        assert act is not None
        t = act.tally
        loop_s, wait_s, failed = self.comm.maximum([t.loop_s, t.steady_wait_s, 1.0 if t.failed else 0.0])
        t.mark_checked()
        decision = None
        if self.comm.leader:
            assert self.explorer is not None
            now = time.monotonic()
            verdict = self.explorer.judge(measured=t.measured, samples=t.samples, loop_s=loop_s, failed=bool(failed), now=now, complete=epoch_end)
            per_sample = loop_s / t.samples if t.samples else float("inf")
            wait_fraction = wait_s / loop_s if loop_s > 0 else float("inf")
            if verdict != CONTINUE:
                cand = self._candidates.get(act.number) if act.number is not None else None
                if cand is not None:
                    self._background.run(f"storing candidate {cand.number}", self.source.tell, cand, verdict, per_sample=per_sample,
                                        wait_fraction=wait_fraction, measured=t.measured, message=t.failed or ("failed on another rank" if failed else ""))
                    self.explorer.record(cand.number, cand.params, verdict, per_sample, t.start_s)
                    rate = loop_rate(per_sample)  # said here, before the decision it leads to
                    shown = f", {rate:.1f} samples/s of the training loop" if rate else ""
                    logger.info("candidate %d %s: %s%s", cand.number, cand.loader.describe(), verdict, shown)
            decision = self._next_decision(verdict, wait_fraction, verdict)
            if (decision["action"] == "settle" and decision["number"] != act.number and not act.fallback and t.measured
                    and self.explorer.stay_to_epoch_end(verdict, per_sample, plan.left())):
                decision["stay"] = True  # the winner starts with the next epoch; this one finishes the current
        self._apply(self.comm.broadcast(decision), plan)

    def _next_decision(self, verdict: str, wait_fraction: float, reason: str) -> dict[str, Any]:
        """Rank 0: continue, switch to the next candidate, or settle on the best."""
        assert self.explorer is not None and self.source is not None
        if verdict == CONTINUE:
            return {"action": "continue"}
        now = time.monotonic()
        if not self.explorer.settle_now(verdict, wait_fraction, now):
            cand = self._background.run("asking the study for a candidate", self.source.ask, quiet=False).result()  # after the tells before it
            if cand is not None:
                self.explorer.tried += 1
                self._candidates[cand.number] = cand
                return {"action": "switch", "number": cand.number, "params": cand.params, "reason": reason}
            reason = "no new candidate"
        elif verdict == BUDGET or self.explorer.over_budget(now):
            reason = "budget spent"
        elif self.explorer.tried >= self.rules.max_candidates:
            reason = "candidates used up"
        else:
            reason = "the loader keeps up with the step"
        best = self.explorer.best
        if best is None:
            return {"action": "settle", "number": None, "params": {**self._safe, "batch_size": self.batch_size}, "reason": f"{reason}; no candidate completed"}
        return {"action": "settle", "number": best.number, "params": best.params, "reason": reason}

    def _apply(self, decision: dict[str, Any], plan: EpochPlan | None) -> None:
        if decision["action"] == "continue":
            return
        old = self._active
        same = old is not None and old.number == decision["number"] and not old.fallback and old.number is not None
        stay = bool(decision.get("stay")) and old is not None and plan is not None
        if not same and not stay:
            if old is not None:
                self._close_loader(old)
            self._active = _Active(decision["number"], dict(decision["params"]))
        entry = {"epoch": max(0, self._epoch - 1), "batch": plan.batches if plan else 0, "action": decision["action"], "trial": decision["number"],
                 "config": LoaderConfig.from_params(decision["params"]).describe(), "reason": decision.get("reason", "")}
        if stay:
            entry["from_next_epoch"] = True  # the current candidate finishes this epoch: cheaper than a second start
        self.history.append(entry)
        why = f"after the previous candidate: {entry['reason']}" if decision["action"] == "switch" and old is not None and entry["reason"] else entry["reason"]
        where = (f"at epoch {entry['epoch']} batch {entry['batch']}" if plan is not None else "before the first batch" if not self.history[:-1]
                 else "as training ended")  # close(): not batch 0 of an epoch after the last switch's
        logger.info("%s to %s %s (%s)%s", entry["action"], entry["config"], where, why,
                    "; from the next epoch on: finishing this one costs less than starting it twice" if stay else "")
        if decision["action"] == "settle":
            self.settled = LoaderConfig.from_params(decision["params"])
            self.batch_size = self.settled.batch_size
            if self.comm.leader and self.source is not None:  # no study when nothing was to be explored
                self._finish(decision)

    def _drain(self) -> None:
        """Wait for rank 0's pending study and YAML writes (close() does)."""
        self._background.drain()
        if self._writing is not None and self._writing.done():
            self.written = self._writing.result()

    def _finish(self, decision: dict[str, Any]) -> None:
        """Rank 0, once settled: close the study's open trials and write the YAML (on the worker thread)."""
        assert self.source is not None and self.explorer is not None
        extra = {
            "tuned_by": "AutoLoader, inside the training loop",
            "score": "samples/s of the training loop (loader plus step)" + self.comm.slowest
                     + (", over whole epochs (an epoch is too short to leave out a warm-up)" if self.short_epochs else ", after each candidate's warm-up"),
            "exploration_s": round(time.monotonic() - self.explorer.started, 1),
            "candidates_tried": self.explorer.tried,
            "settled_because": decision.get("reason", ""),
            # the next run goes on exploring in this study (see _setup.cut_short)
            **({"exploration_cut_short": True} if str(decision.get("reason", "")).startswith(CUT_SHORT) else {}),
        }
        source = self.source
        write = functools.partial(write_yaml, source, self.config_path, extra, whole_epochs=self._epoch_batches, slowest=self.comm.slowest)
        self._background.run("closing the study's open trials", source.abandon_open_trials)  # in order, before the YAML
        self._writing = self._background.run("writing the YAML", write)  # refers to no AutoLoader: one dropped meanwhile is finalised
