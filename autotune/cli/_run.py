"""``autotune run``: tune the loader for a dataset on this machine and write the YAML."""

from __future__ import annotations

import _thread
import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from autotune.cli._output import write_json
from autotune.cli._types import given, nonneg_float, nonneg_int, positive_float, positive_int, seed_int

if TYPE_CHECKING:
    from autotune.tuning.request import RunRequest

logger = logging.getLogger(__name__)

NAME = "run"
HELP = "tune the data loader on this machine and write autotune.yaml"
DESCRIPTION = (
    "Run an Optuna study over the search space: each trial builds a loader in a fresh process, measures the\n"
    "samples/s it delivers on the device, and the best config (re-measured) is written as YAML."
)
EXAMPLES = """examples:
  autotune run --demo                                   # make a demo dataset and tune on it
  autotune run --dataset /data/train                    # default space (torch + DALI), one minute in all
  autotune run --dataset /data/train --budget 300       # a longer search: five minutes
  autotune run --dataset /data/train --space torch --batch-size 256 --n-trials 30
  autotune run --dataset /data/train --resume           # continue the latest study for this machine
  autotune run --dataset /data/train --warm-start autotune.yaml
  autotune run --if-stale autotune.yaml                 # cron: re-tune (its dataset, its file) only when the machine changed
  autotune run --dataset /data/train --json --quiet > summary.json   # scripts: JSON on stdout, errors on stderr

exit codes: 0 tuned (config and report written); 1 no trial completed; 2 bad input; 130 interrupted by
Ctrl-C, 143 stopped by SIGTERM (docker stop, systemd, Slurm), 129 by SIGHUP: each way the running trial is marked
interrupted and the best config so far is still written (to NAME.interrupted.yaml when --out holds an
earlier run's config, which is kept; none before the first trial completes; signals after the first wait
until it is written); continue with --resume
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from autotune.loaders.presets import PRESETS
    from autotune.study.tuner import PRUNERS, SAMPLERS
    from autotune.tuning.request import REMEASURE

    src = p.add_mutually_exclusive_group()
    src.add_argument("--dataset", metavar="DIR", help="image folder with one sub-folder per class, or your own Dataset: FILE.py:FUNC or "
                     "package.module:FUNC, a function that returns a torch Dataset or an autotune.DatasetSpec (needs --batch-size)")
    src.add_argument("--demo", action="store_true", help="generate a demo dataset (2,000 JPEGs) in the cache folder and tune on it")
    p.add_argument("--space", type=given, default=None, metavar="FILE",
                   help="search space YAML, or a shipped name: default, torch, dali, cpu (default: default; with --if-stale FILE, FILE's)")
    p.add_argument("--n-trials", type=positive_int, default=None, metavar="N",
                   help="run N trials instead of a time budget (N measured trials, then the re-measurement)")
    p.add_argument("--timeout", type=positive_float, default=None, metavar="S", help="stop sampling new trials after S seconds")
    p.add_argument("--out", type=given, default=None, metavar="FILE", help="where to write the config (default: the --if-stale FILE, else autotune.yaml)")
    p.add_argument("--storage", type=given, default="sqlite:///autotune.db", metavar="URL", help="Optuna storage URL or journal file (default: %(default)s)")
    p.add_argument("--study-name", type=given, metavar="NAME",
                   help="default: <dataset>-<key>-<time>, the key a hash of this machine, the dataset and the run's settings (pipeline, space, ranks, "
                        "model, device)")
    p.add_argument("--resume", action="store_true", help="continue --study-name (or the latest study for this machine and dataset)")
    p.add_argument("--pipeline", type=given, default=None, metavar="NAME",
                   help=f"preset: {', '.join(PRESETS)} (default: imagenet-train; with --if-stale FILE, FILE's)")
    p.add_argument("--device", type=given, default=None, metavar="DEV", help="where batches are delivered: cuda or cpu (default: cuda when a GPU is visible)")
    p.add_argument("--batch-size", type=positive_int, default=None, metavar="N", help="fix the batch size instead of tuning it")
    p.add_argument("--tune-batch-size", action="store_true", help="your own Dataset: tune the batch size too (half, once and twice --batch-size)")
    p.add_argument("--seed", type=seed_int, default=None, help="seed for the sampler and the loaders")
    m = p.add_argument_group("measurement")
    m.add_argument("--budget", type=positive_float, default=None, metavar="S",
                   help="spend about S seconds in all, from start to YAML (10 or more): the run plans its windows, trials and re-measurements to fit "
                        "(default: 60, 120 with --model; none when --n-trials or --timeout is given)")
    m.add_argument("--window", type=positive_float, default=None, metavar="S", help="seconds per timed window (default: 1.0; planned with --budget)")
    m.add_argument("--windows", type=positive_int, default=None, metavar="N",
                   help="steady windows per trial; the score is their median (default: 5; planned with --budget)")
    m.add_argument("--warmup-batches", type=nonneg_int, default=2, metavar="N", help="untimed batches after the first (default: %(default)s)")
    m.add_argument("--trial-timeout", type=positive_float, default=180.0, metavar="S", help="wall-clock limit of one trial (default: %(default)s)")
    m.add_argument("--confirm-top", type=nonneg_int, default=None, metavar="K",
                   help="re-measure the K best configs before choosing (default: 3; planned with --budget; 0 or 1: none, the best single trial wins)")
    m.add_argument("--confirm-repeats", type=nonneg_int, default=None, metavar="R", help="re-measurements of each (default: 2; planned with --budget)")
    m.add_argument("--remeasure", choices=REMEASURE, default="paired",
                   help="paired: re-measure the K best side by side in one process (a kept one of their kind, else fresh), alternating windows, "
                        "compared round by round "
                        "(3 rounds for each of R, or what the budget leaves); fresh: each in a fresh process of its own, R times (default: %(default)s)")
    m.add_argument("--cache", choices=("warm", "cold"), default="warm",
                   help="warm: read the data once first (if it fits in RAM); cold: evict it before each trial")
    m.add_argument("--build-ahead", choices=("auto", "on", "off"), default="auto",
                   help="build the next trial's loader while one is measured (auto: on a CUDA device, where a build takes seconds)")
    m.add_argument("--sampler", choices=SAMPLERS, default="tpe", help="Optuna sampler (default: %(default)s)")
    m.add_argument("--pruner", choices=PRUNERS, default="median", help="Optuna pruner (default: %(default)s)")
    m.add_argument("--no-baselines", action="store_true", help="do not enqueue the defaults and heuristic baselines")
    g = p.add_argument_group("memory budgets")
    g.add_argument("--host-budget", metavar="MIB", type=positive_float, default=None,
                   help="host memory a trial's process tree may use (default: 80%% of available)")
    g.add_argument("--gpu-budget", metavar="MIB", type=positive_float, default=None,
                   help="GPU memory a trial may use (default: 90%% of free minus --reserve-gpu-mem)")
    g.add_argument("--reserve-gpu-mem", metavar="MIB", type=nonneg_float, default=0.0, help="GPU memory to leave for the training model (default: 0)")
    g.add_argument("--shm-budget", metavar="MIB", type=positive_float, default=None, help="/dev/shm a trial may use (default: 80%% of its size)")
    f = p.add_argument_group("re-tuning and fleets")
    f.add_argument("--warm-start", type=given, metavar="FILE",
                   help="enqueue the winner of an earlier autotune.yaml and its neighbours first (a DALI winner: the torch heuristic second)")
    f.add_argument("--if-stale", type=given, metavar="FILE",
                   help="do nothing (exit 0) when FILE still matches this machine; otherwise tune, starting from FILE's winner "
                   "(as --warm-start FILE), on FILE's recorded dataset unless --dataset is given, and write FILE unless --out is given")
    f.add_argument("--reuse", action="store_true",
                   help="if the storage holds finished studies for this fingerprint, write the best one's config without tuning")
    f.add_argument("--max-age", type=positive_float, default=None, metavar="DAYS", help="with --reuse/--if-stale: a study or file older than this is stale")
    f.add_argument("--gpus", type=positive_int, default=None, metavar="N",
                   help="ranks measured at once, one loader per GPU (default: all visible GPUs; 1 on CPU, where N rank processes share the cores, as a "
                        "gloo DDP job)")
    t = p.add_argument_group("model in the loop")
    t.add_argument("--model", type=given, metavar="NAME", help="score training steps of a torchvision model (random weights), e.g. resnet50")
    t.add_argument("--amp", action="store_true", help="with --model: bf16 autocast on GPU")
    t.add_argument("--channels-last", action="store_true", help="with --model: channels_last memory format")
    t.add_argument("--step-ms", type=positive_float, default=None, metavar="MS", help="simulate a model that takes MS per step")
    t.add_argument("--tolerance", type=nonneg_float, default=0.02, metavar="F",
                   help="with a model: prefer the cheapest config within F of the best (default: %(default)s)")
    o = p.add_argument_group("output")
    o.add_argument("--quiet", action="store_true", help="print errors only (no progress, no warnings)")
    o.add_argument("--json", action="store_true", help="print a JSON summary on stdout (progress goes to stderr)")
    o.add_argument("--no-report", action="store_true", help="do not write the report in reports/<study>/ (the trials' logs still go to its trials/ folder)")
    o.add_argument("--reports-dir", type=given, default="reports", metavar="DIR", help="where reports go (default: %(default)s)")


class _StdoutToStderr:
    """With --json, stdout carries the summary alone: anything else written to file descriptor 1 while tuning
    (trial child processes, native libraries) goes to stderr."""

    def __enter__(self) -> None:
        sys.stdout.flush()
        self.saved = os.dup(1)
        os.dup2(2, 1)

    def __exit__(self, *exc: object) -> None:
        sys.stdout.flush()
        os.dup2(self.saved, 1)
        os.close(self.saved)


class _StopOnce:
    """While tuning, the first SIGINT, SIGTERM or SIGHUP stops the run as Ctrl-C does (the running trial is marked,
    the best config so far written); SIGTERM raises :class:`~autotune.errors.Terminated`, SIGHUP
    :class:`~autotune.errors.HungUp`. The signals that follow are told once and dropped until the YAML is written
    (a second Ctrl-C, or a supervisor's repeated SIGTERM, landed in the clean-up and lost the config); after that,
    one stops what is left (the report). SIGKILL always ends it. A signal the shell set to be ignored (``nohup``, a
    background job's SIGINT) stays ignored, and a process forked meanwhile (the demo set's drawing pool) is stopped
    by its signals as usual.

    ``written`` tells whether the YAML is whole yet; ``exits``: the process ends with the run (the ``autotune``
    command), so a signal after a stopped run is ignored rather than turning its exit code into a death.
    """

    def __init__(self, *, written: Callable[[], str | None] = lambda: None, exits: bool = False) -> None:
        self.written = written
        self.exits = exits
        self.pid = os.getpid()
        self.stopping = False
        self.told = False
        self.old: dict[int, Any] = {}
        self.raised: KeyboardInterrupt | None = None  # the stop raised last, until it is seen swallowed
        self.lost: KeyboardInterrupt | None = None  # that stop, swallowed where Python drops exceptions
        self.hook: Callable[[Any], object] | None = None
        self.closing = False  # __exit__ has begun: a stop now is kept, and raised once the handlers are back
        self.cancelled = False  # the swallowed stop's second sending is called off
        self.sent = threading.Event()  # that sending is over (sent or called off)
        self.sent.set()
        self.signum: int = signal.SIGINT

    def handle(self, signum: int, frame: object) -> None:
        from autotune.errors import HungUp, Terminated, stop_requested

        if os.getpid() != self.pid:  # a forked child (a process pool's worker): what the signal does by default
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        stops: dict[int, type[KeyboardInterrupt]] = {signal.SIGINT: KeyboardInterrupt, signal.SIGTERM: Terminated}
        if self.closing:  # the handlers are being put back: a stop, first or swallowed, is raised once they are
            if not self.stopping:
                self.stopping, self.lost = True, stops.get(signum, HungUp)()
            return
        if self.lost is not None:  # the stop was swallowed: raised again here, where it can end the run
            lost, self.lost = self.lost, None
            self.raised = lost
            raise lost
        if self.stopping and not self.written():
            if not self.told:
                self.told = True
                with contextlib.suppress(OSError, ValueError):  # a closed terminal
                    print("autotune: stopping already, keeping what the run measured (kill -9 ends it at once)", file=sys.stderr, flush=True)
            return
        self.stopping = True
        self.raised = stops.get(signum, HungUp)()
        self.signum = signum
        stop_requested(self.raised)  # raised again before the next measurement if this one never reaches the run
        raise self.raised

    def unraisable(self, seen: Any) -> None:
        """``sys.unraisablehook``: a signal landing in a weakref callback or a ``__del__`` (SQLAlchemy's, at a garbage
        collection) raised the stop where Python prints "Exception ignored" and goes on; the run then finished
        every trial and exited 0 under a SIGTERM. The stop is kept and the signal sent again, to land elsewhere."""
        if self.raised is None or seen.exc_value is not self.raised or os.getpid() != self.pid:  # a forked child's: not ours
            if self.hook is not None:
                self.hook(seen)
            return
        self.lost, self.raised = self.raised, None
        # a bare thread: threading.Thread.start() takes a lock that the code the collection interrupted may hold
        self.sent.clear()
        _thread.start_new_thread(self._send_again, ())

    def _send_again(self) -> None:
        try:
            time.sleep(0.02)
            if not self.cancelled:
                with contextlib.suppress(OSError):  # the process is gone
                    os.kill(self.pid, self.signum)
        finally:
            self.sent.set()

    def __enter__(self) -> _StopOnce:
        from autotune.errors import STOP_SIGNALS

        for sig in STOP_SIGNALS:
            try:
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    self.old[sig] = signal.signal(sig, self.handle)
            except ValueError:  # not the main thread: the signals stay as they are
                break
        if self.old:
            self.hook, sys.unraisablehook = sys.unraisablehook, self.unraisable
        return self

    def __exit__(self, *exc: object) -> None:
        from autotune.errors import stop_requested

        # a stopped run whose process exits next: what it wrote is written, and its exit code (130, 143, 129) chosen;
        # the eighth Ctrl-C, landing before the exit, made it die of SIGINT instead (-2)
        self.closing = True
        stop_requested(None)
        try:
            if self.hook is not None:
                sys.unraisablehook, self.hook = self.hook, None
            self.cancelled = True
            self.sent.wait(1.0)  # a second sending under way ends before the handlers go back (SIG_DFL would kill)
        finally:
            quiet = self.stopping and self.exits  # a stop that came while closing counts too
            for sig, old in self.old.items():
                signal.signal(sig, signal.SIG_IGN if quiet else signal.SIG_DFL if old is None else old)
        if self.lost is not None and exc[0] is None:  # swallowed, and the block ended before it landed again
            lost, self.lost = self.lost, None
            raise lost


def request_from_args(args: argparse.Namespace) -> RunRequest:
    """The run's frozen request from the parsed flags (not given: None), defaults and ``--if-stale`` FILE's
    recorded flags resolved. Raises :class:`~autotune.errors.UserError` for a setting no run can take."""
    from autotune.tuning.request import SETTINGS, resolve_request

    return resolve_request({name: value for name, value in vars(args).items() if name in SETTINGS})


def run(args: argparse.Namespace) -> int:
    from autotune.cli._output import TerminalReporter
    from autotune.tuning.run import run as tune

    progress = TerminalReporter(quiet=args.quiet)
    try:
        with _StopOnce(written=lambda: progress.written, exits=bool(getattr(args, "exits", False))):
            request = request_from_args(args)
            if args.json:
                with _StdoutToStderr():
                    summary = tune(request, progress)
            else:
                summary = tune(request, progress)
    finally:
        progress.stop()
    if args.json:
        write_json(summary, indent=2)
        sys.stdout.write("\n")
    return int(summary.get("exit_code", 0))
