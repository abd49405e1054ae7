"""The first step of a run: every check, the machine's fingerprint, the device, the settings, the search space,
the warm start, the dataset (or the demo set), and the ``--if-stale`` and ``--reuse`` answers that end a run early.

Bad input is found here, before the study exists: each is one :class:`~autotune.errors.UserError` line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from autotune.config import fingerprint
from autotune.config.files import folder_problem, foreign_problem, write_problem
from autotune.config.schema import DEVICE_RE
from autotune.dataset import user as user_target
from autotune.dataset.paths import printable
from autotune.dataset.scan import scan
from autotune.errors import DatasetError, UserError
from autotune.loaders.backends import other_kind_of_space, own_kind
from autotune.loaders.presets import get_preset
from autotune.study.budget import WRITE_RESERVE_S, Plan, TimeBudget, plan
from autotune.study.fleet import previous_best, reuse
from autotune.study.space import SearchSpace, load_space
from autotune.study.storage import journal_file, mask_url, sqlite_file, storage_problem
from autotune.study.tuner import TuneSettings
from autotune.trials.guard import OtherLoad
from autotune.trials.zygote import Zygote
from autotune.tuning.reporter import Reporter
from autotune.tuning.request import DEFAULT_SPACE, REMEASURE, RunRequest

if TYPE_CHECKING:
    import argparse

    from autotune.dataset.scan import Dataset

logger = logging.getLogger(__name__)
KEEPS_LAST = "imagenet-eval"  # the preset whose loader keeps each epoch's last partial batch


@dataclasses.dataclass
class Prepared:
    """What the checks and the set-up found, for the steps that follow."""

    out_path: Path
    fp: dict[str, Any]  # this machine's fingerprint
    others: OtherLoad  # other jobs' CPU use over the run: on a busy machine the figures are not to be trusted
    device: str
    settings: TuneSettings
    space: SearchSpace
    warm: dict[str, Any] | None  # the warm start's winner, enqueued first
    dataset: Dataset
    budget: TimeBudget | None
    key: str  # what makes two studies comparable (:func:`study_key`)
    zygote: Zygote | None
    zygote_log: str  # the zygote's output until the study's log folder is known


def prepare(request: RunRequest, reporter: Reporter, early: contextlib.ExitStack) -> Prepared | dict[str, Any]:
    """Check the request, set up the measuring and scan the dataset. Returns what the search needs, or the run's
    summary when it ends here: ``--if-stale FILE`` still matches, or ``--reuse`` found a study (and wrote its YAML).
    ``early`` closes the measuring process at the run's end unless a tuner has taken it over."""
    budget = TimeBudget(request.budget, start=request.started) if request.budget is not None else None
    out_path = checked_outputs(request)
    user = user_target.is_target(request.dataset) and not request.demo
    # the measuring process starts first, so that it imports torch while this one reads the machine, the flags and the
    # dataset: started after them, it kept the first trial of a default run on an H100 waiting 5.2 s. Not for a run
    # that may end before it tunes (--reuse, --if-stale); a user's module is imported once every flag is checked (below)
    zygote, zygote_log = (None, "") if request.reuse or request.if_stale or user else launch_zygote(early)
    fp = fingerprint.collect()
    _mark(budget, "fingerprint")
    others = OtherLoad(usable=fp.get("cpus"))
    warm_start = request.warm_start
    if request.if_stale:
        done = _stale_or_done(request, request.if_stale, fp, reporter)
        if done is not None:
            return done
        if not warm_start and Path(request.if_stale).exists():
            warm_start = request.if_stale
    device = _device(request, fp)
    settings = settings_for(request, fp, device)  # bad flags are a lone error line, before the scan
    # 'cores' in a space: each rank's share; a bad --space is a lone error line, before the scan and its set-up line
    space = load_space("user" if user and request.space == DEFAULT_SPACE else request.space, cores=settings.cores, device=device)
    if not user and (why := other_kind_of_space(space.backends(), request.space, None)):
        raise UserError(why)
    warm = None
    if warm_start and not user:  # read before the scan and the study: a bad --warm-start is a lone line and leaves no empty study
        warm = previous_best(warm_start, request.storage, backends=space.backends())  # a DALI winner into --space torch: its fallback
    if not user:
        _later_imports(zygote, settings, space)
    if user:  # the user's own Dataset: imported and called here first, so that its errors are one line before any trial
        if not request.reuse and request.batch_size is not None:  # its import in the measuring process overlaps this one's
            zygote, zygote_log = launch_zygote(early, preload=user_target.absolute(str(request.dataset)))
        dataset, space = _user_dataset(request, space, cores=settings.cores, device=device, budget=budget)
        _later_imports(zygote, settings, space)
        if isinstance(dataset, user_target.UserDataset) and dataset.iterable and not dataset.dali and get_preset(settings.pipeline).train:
            # a stream is measured whole, as build_loader reads it (drop_last=False): dropping each worker's last partial
            # batch made more workers look slower, and where 16 workers each held less than a batch of a 4,000-sample
            # stream, the trial read no batch (the 16-worker start crashed and 1 worker won at a sixth of the peers' rate)
            settings = dataclasses.replace(settings, pipeline=KEEPS_LAST)
            logger.info("%s is a stream: measured whole, each worker's last partial batch kept (%s)", dataset.qualname, KEEPS_LAST)
        if warm_start:  # read once the kind is known (a DALI pipeline function's space is dali_user), before the study
            warm = previous_best(warm_start, request.storage, backends=space.backends())
        dataset_path = dataset.root
    else:
        # the dataset after every check of the flags: a bad flag does not wait for the demo set to be made
        dataset_path, budget = _dataset_path(request, device, space, budget, reporter)
        from autotune import doctor

        # the set-up overlaps: the torch probe of the preflight and the trials' zygote (started first) import while the dataset is scanned
        doctor.start_probe(remember=fp)  # a probe passed on this installation before is read, not run again
        # --reuse: a stored study usually answers, and then nothing is measured; the measuring process waits for a miss
        if zygote is None and not request.reuse:  # --if-stale, found stale: it tunes
            zygote, zygote_log = launch_zygote(early)
            _later_imports(zygote, settings, space)
        try:
            dataset = scan(dataset_path)  # each unusable file is named once, as a warning; a bad folder is a lone error line
        except DatasetError as e:
            raise DatasetError(f"{e}, or use --demo" if "does not exist" in str(e) else str(e)) from None
    _mark(budget, "dataset")
    # the set-up takes seconds (torch imports twice, in the probe and the zygote): say what happens
    doing = "looking for a finished study to reuse" if request.reuse else "starting the measuring process"
    reporter.say(f"setting up: {dataset.count_text()} {'from' if user else 'in'} {printable(dataset_path)}, {doing} ...")
    if budget is not None:
        spend = budget
        # time_left: a trial past it is cut; measure_left: a trial past it ends at its next window (the re-measurement keeps its
        # time); ahead_fits: the next trial may be built while one measures
        settings = dataclasses.replace(settings, time_left=lambda: spend.remaining() - WRITE_RESERVE_S, measure_left=spend.measure_left,
                                       ahead_fits=spend.ahead_fits)
    if not user:
        dataset = _checked_dataset(request, dataset, dataset_path, device, space)
        _mark(budget, "preflight")
    _check_same_dataset(request, out_path, dataset)  # before --reuse writes it, and before any trial
    if request.batch_size is not None and not (user and request.tune_batch_size):
        space = space.fix("batch_size", request.batch_size)
    if len(dataset):  # a stream of unknown length is not checked against its batch sizes
        space = fit_batch_sizes(space, len(dataset) // settings.ranks, get_preset(settings.pipeline).train, settings.ranks, dataset.unit)
    model = request.model or (f"step{request.step_ms}" if request.step_ms else None)
    key = study_key(fp, dataset.signature(), settings.pipeline, space.name, settings.ranks, model, device)
    if request.reuse:
        reused = _reused(request, key, out_path, reporter)
        if reused is not None:
            return reused
        zygote, zygote_log = launch_zygote(early, preload=dataset_path if user else None)  # nothing to reuse: this run tunes
        _later_imports(zygote, settings, space)
    _mark(budget, "prepared")
    return Prepared(out_path=out_path, fp=fp, others=others, device=device, settings=settings, space=space, warm=warm, dataset=dataset,
                    budget=budget, key=key, zygote=zygote, zygote_log=zygote_log)


def _mark(budget: TimeBudget | None, step: str) -> None:
    """The set-up's ``step`` ended now (recorded with a budget: the study's ``time.setup_marks_s``)."""
    if budget is not None:
        budget.mark(step)


def _stale_or_done(request: RunRequest, path: str, fp: dict[str, Any], reporter: Reporter) -> dict[str, Any] | None:
    """``--if-stale FILE`` (``path``): the run's summary when FILE still matches this machine (nothing to do), else None."""
    from autotune.config.staleness import is_stale

    stale, reasons = is_stale(path, fp, max_age_days=request.max_age, dataset=request.dataset)
    if not stale:
        reporter.say(f"{path} still matches this machine: nothing to do")
        return {"action": "none", "reason": "config matches this machine", "config": path}
    taken = f" with its {' '.join(request.recorded)}" if request.recorded else ""
    reporter.say(f"{path} is stale ({'; '.join(reasons)}): re-tuning{taken}")
    return None


def _device(request: RunRequest, fp: dict[str, Any]) -> str:
    """Where batches are delivered: ``--device``, else cuda when a GPU is visible; checked against this machine."""
    device = request.device or default_device(fp)
    if not DEVICE_RE.fullmatch(device):  # "cuda:abc" passed here and failed later
        raise UserError(f"--device must be cpu, cuda or cuda:N, but got {device!r}")
    if device.startswith("cuda") and not fp.get("gpus"):
        raise UserError("--device cuda asked for, but no NVIDIA GPU is visible here (NVML found none); run 'autotune doctor' or pass --device cpu")
    return device


def _dataset_path(request: RunRequest, device: str, space: SearchSpace, budget: TimeBudget | None,
                  reporter: Reporter) -> tuple[str, TimeBudget | None]:
    """The folder to tune on, the demo set made first where asked; the budget starts again after making it."""
    from autotune import doctor

    if request.demo:
        from autotune.dataset import synth

        if not (synth.demo_root() / synth.DEMO_COMPLETE).exists():
            doctor.preflight(None, device, workers=_uses_workers(space))  # a torch that cannot run trials: told before a minute of image-making
            reporter.say(f"making the demo dataset in {printable(str(synth.demo_root()))} (once; about a minute on two cores) ...")
        path = str(synth.demo_dataset(progress=reporter.counter("demo images")))
        if budget is not None:  # making the demo set once is not tuning time
            budget = TimeBudget(budget.total_s)
        return path, budget
    if request.dataset:
        return request.dataset, budget
    raise UserError("no dataset given; pass --dataset DIR (one sub-folder per class) or --demo")


def _uses_workers(space: SearchSpace) -> bool:
    """Whether every config of the space starts DataLoader worker processes, so that a /dev/shm too small for one
    worker fails them all (the preflight then stops the run). Where some do not (no workers, or DALI), a small
    /dev/shm is a warning: the memory guard leaves out each config predicted not to fit, and the rest are measured."""
    nw = space["num_workers"] if "num_workers" in space else None
    return space.backends() == ("torch",) and nw is not None and min(nw.choices or (nw.low,)) > 0


def _checked_dataset(request: RunRequest, dataset: Dataset, path: str, device: str, space: SearchSpace) -> Dataset:
    """The preflight on the scanned dataset: files whose pixels cannot be decoded are left out (a warning names
    them), and ``--model`` is checked by the probe that ran meanwhile."""
    from autotune import doctor

    checks = doctor.preflight(path, device, scanned=dataset, workers=_uses_workers(space))
    undecodable = [f for c in checks or () if c.name == "unreadable" for f in c.files]
    if undecodable:  # the headers were fine, the pixels are not (a truncated JPEG): found now, not one trial at a time
        logger.warning("%d of the files decoded before the trials cannot be decoded (first %s): left out of the trials; "
                       "fix or remove them before training", len(undecodable), printable(undecodable[0]))
        dataset = dataset.without([dataset.name_of(f) for f in undecodable], "cannot be decoded")
    if request.model:
        doctor.check_model_name(request.model)  # before the ceiling's trial (seconds), from the probe that ran meanwhile
    return dataset


def _reused(request: RunRequest, key: str, out_path: Path, reporter: Reporter) -> dict[str, Any] | None:
    """``--reuse``: the summary of the stored study whose YAML was written to ``out_path``, or None to tune."""
    reused = reuse(request.storage, key, out_path, max_age_days=request.max_age)
    if reused is None:
        return None
    n = reused.get("fresh_studies", 1)
    why = f" (the best of {n} finished studies for this machine and dataset{' within --max-age' if request.max_age is not None else ''})" if n > 1 else ""
    reporter.say(f"reused study {reused['study']}{why}: {reused['result'].get('samples_per_s', 0):,.0f} samples/s; wrote {out_path} without tuning")
    return reused


def default_device(fp: dict[str, Any]) -> str:
    return "cuda" if fp.get("gpus") else "cpu"


def study_key(fp: dict[str, Any], dataset_sig: str, pipeline: str, space: str, ranks: int, model: str | None, device: str = "cpu") -> str:
    """What makes two studies comparable: the machine, the data, the pipeline, the space, the ranks, the model, the
    kind of device (a study measured on the CPU says nothing of GPU delivery on the same machine)."""
    kind = "cuda" if device.startswith("cuda") else "cpu"
    return fingerprint.key(fp, f"{dataset_sig}|{pipeline}|{space}|{ranks}|{model or ''}" + ("|cuda" if kind == "cuda" else ""))


def settings_for(request: RunRequest, fp: dict[str, Any], device: str) -> TuneSettings:
    """The study's settings from the request on this machine: the ranks, the model, the memory budgets and the
    measurement (planned from ``--budget`` where it is given). Raises :class:`UserError` for settings that
    cannot run here."""
    from autotune.trials import guard

    ranks = request.gpus if request.gpus is not None else (max(1, fp.get("gpus") or 1) if device.startswith("cuda") else 1)
    if device.startswith("cuda") and ranks > (fp.get("gpus") or 0):
        raise UserError(f"--gpus {ranks} asks for more GPUs than the {fp.get('gpus') or 0} visible here; pass --gpus {fp.get('gpus') or 1} or fewer")
    cores = fingerprint.usable_cpus()
    if not device.startswith("cuda") and ranks > cores:  # CPU ranks (a gloo job) measured as they would run: slowly
        logger.warning("--gpus %d on the CPU measures %d rank processes on %d usable cores, as a gloo job of that size would run; "
                       "for a GPU node, tune there (or pass --device cuda)", ranks, ranks, cores)
    if (request.amp or request.channels_last) and not request.model and not request.step_ms:  # ModelSpec: --step-ms
        raise UserError("--amp and --channels-last apply to the model's steps; add --model NAME (e.g. resnet50), or drop them")
    model = None
    if request.model or request.step_ms:
        from autotune.trials.model import ModelSpec

        model = ModelSpec.from_args(cast("argparse.Namespace", request))  # it reads the model's flags by their names
    budgets = guard.default_budgets(host_mib=request.host_budget, gpu_mib=request.gpu_budget, reserve_gpu_mib=request.reserve_gpu_mem,
                                    shm_mib=request.shm_budget, device=device)
    m, trial_timeout = _measurement(request)
    return TuneSettings(
        pipeline=request.pipeline, device=device, n_trials=request.n_trials, timeout=request.timeout, seed=request.seed,
        warmup_batches=request.warmup_batches, window_s=m.window_s, windows=m.windows, trial_timeout=trial_timeout,
        confirm_top=m.confirm_top, confirm_repeats=m.confirm_repeats, paired=_paired(request.remeasure), sampler=request.sampler, pruner=request.pruner,
        baselines=not request.no_baselines, cores=max(1, fp["cpus"] // ranks), cache=request.cache, ranks=ranks, budgets=budgets, model=model,
        planned=frozenset(k for k, given in (("window_s", request.window), ("windows", request.windows)) if given is None),
        # a cold cache is evicted before each trial: a build ahead would read the files first
        build_ahead=request.cache != "cold" and (request.build_ahead == "on" or (request.build_ahead == "auto" and device.startswith("cuda"))),
    )


def _measurement(request: RunRequest) -> tuple[Plan, float]:
    """The windows and re-measurements (planned from ``--budget`` where it is given) and the time a trial may take."""
    budget_s = request.budget
    if budget_s is not None:
        m = plan(budget_s, window_s=request.window, windows=request.windows, confirm_top=request.confirm_top, confirm_repeats=request.confirm_repeats)
    else:
        m = Plan(request.window if request.window is not None else 1.0, request.windows if request.windows is not None else 5,
                 request.confirm_top if request.confirm_top is not None else 3, request.confirm_repeats if request.confirm_repeats is not None else 2)
    trial_timeout = request.trial_timeout if budget_s is None else min(request.trial_timeout, max(15.0, budget_s / 2))
    if m.window_s * m.windows >= trial_timeout:  # every trial would run out of time measuring
        limit = "--trial-timeout" if budget_s is None or trial_timeout == request.trial_timeout else f"set by the {budget_s:g} s --budget"
        raise UserError(f"--window {m.window_s:g} s x {m.windows} windows is {m.window_s * m.windows:g} s of measuring per trial, "
                        f"more than the {trial_timeout:g} s a trial may take ({limit}); pass a shorter --window or fewer --windows")
    return m, trial_timeout


def fit_batch_sizes(space: SearchSpace, samples_per_rank: int, drop_last: bool, ranks: int = 1, unit: str = "images") -> SearchSpace:
    """Leave out batch sizes that give no full batch (train presets drop the last partial one); ``unit``: what the
    dataset's items are called (``samples`` for the user's own)."""
    p = space["batch_size"]
    if not drop_last or p.kind != "choices":
        return space
    fitting = tuple(b for b in p.choices if b <= samples_per_rank)
    if not fitting:
        fix = f"pass fewer --gpus, a smaller --batch-size, or use more {unit}" if ranks > 1 else f"pass a smaller --batch-size or use more {unit}"
        raise UserError(f"every batch size in the space ({', '.join(map(str, p.choices))}) is larger than the {samples_per_rank} {unit} per rank"
                        + (f" (the {unit} split over {ranks} ranks)" if ranks > 1 else "") + f"; {fix}")
    if len(fitting) < len(p.choices):
        logger.warning("leaving out batch sizes larger than the dataset's %d %s: %s", samples_per_rank, unit, [b for b in p.choices if b not in fitting])
    return space.restrict("batch_size", fitting)


def _user_dataset(request: RunRequest, space: SearchSpace, *, cores: int, device: str, budget: TimeBudget | None = None) -> tuple[Dataset, SearchSpace]:
    """The user's pipeline function (``--dataset FILE.py:FUNC``) imported and called once here: its dataset for the
    study, and the space fitted to it (the batch size is the user's; spawned workers only for a dataset that pickles;
    for a DALI pipeline function the space ``dali_user``, with ``hw_decoder_load`` only where the function takes it)."""
    if request.batch_size is None:
        raise UserError(f"--dataset {request.dataset} is your own Dataset: pass its --batch-size (the one training uses)")
    left = budget.remaining() if budget is not None else None
    with user_target.deadline(str(request.dataset), left, budget.total_s if budget is not None else None):
        dataset, _ = user_target.open_target(str(request.dataset))
    kind = own_kind(dataset)
    if request.space == DEFAULT_SPACE and space.backends() != (kind,):  # a DALI pipeline function's own space
        space = load_space(kind, cores=cores, device=device)
    if why := other_kind_of_space(space.backends(), request.space, kind):  # a folder's loaders would fail alike trial after trial
        raise UserError(why)
    if not dataset.hw_decoder_load and "hw_decoder_load" in space:
        space = dataclasses.replace(space, params=tuple(p for p in space.params if p.name != "hw_decoder_load"))
    b = request.batch_size
    space = space.fix("batch_size", b)
    if request.tune_batch_size:  # the user's size, half and twice it
        space = dataclasses.replace(space, params=tuple(dataclasses.replace(p, choices=tuple(sorted({max(1, b // 2), b, 2 * b})))
                                                        if p.name == "batch_size" else p for p in space.params))
    if not dataset.pickles and "multiprocessing_context" in space:
        logger.info("%s does not pickle: its workers are forked (not spawned)", dataset.qualname)
        space = space.restrict("multiprocessing_context", ("fork",))
    if dataset.iterable and not dataset.dali and not dataset.samples and "persistent_workers" in space:
        # a stream of unknown length: the start its workers pay again every epoch cannot be priced per sample (a trial's
        # windows fall inside one epoch), and workers that persist never pay it again. Unpriced, a forkserver start
        # each epoch won a 2-core study and then read half the rate of a worker per core over whole epochs
        logger.info("%s is a stream of unknown length: its workers persist", dataset.qualname)
        space = space.restrict("persistent_workers", (True,))
    return dataset, space


def _later_imports(zygote: Zygote | None, settings: TuneSettings, space: SearchSpace) -> None:
    """When the measuring process imports torchvision (:data:`~autotune.trials.zygote.LATER`): at once, unless the
    search builds its second trial beside the first, both of a kind that needs none (DALI's): then once those two are
    forked, while they build, or never where no kind of the space (nor a model) needs it."""
    from autotune.loaders.backends import get_backend

    if zygote is None:
        return
    kinds = [get_backend(b) for b in space.backends()]
    if not (settings.build_ahead and any(k.reuses_process and not k.needs_torchvision for k in kinds)):
        zygote.later_after(0)
    else:
        zygote.later_after(2 if settings.model is not None or any(k.needs_torchvision for k in kinds) else None)


def launch_zygote(early: contextlib.ExitStack, preload: str | None = None) -> tuple[Zygote | None, str]:
    """The process trials are forked from, started now so that it imports torch while the rest is set up; its
    output goes to a temporary log until the study's log folder is known. ``early`` closes it at the end unless
    a tuner has taken it over (closing twice is harmless). ``preload``: a user's pipeline function (``FILE.py:FUNC``),
    whose module it imports once for every trial."""
    fd, log = tempfile.mkstemp(prefix="autotune-zygote-", suffix=".log")
    os.close(fd)
    early.callback(lambda: Path(log).unlink(missing_ok=True))
    zygote = Zygote.launch(log=log, preload=preload)
    if zygote is not None:
        early.callback(zygote.close)
    return zygote, log


def _check_same_dataset(request: RunRequest, out_path: Path, dataset: Dataset) -> None:
    """Unless ``--out`` (or ``--if-stale``) named it, raise when the YAML at ``out_path`` holds the config for another
    dataset than this run tunes: tuning a second dataset in the same folder replaced the first one's config without a
    word. The same folder, or the same files elsewhere (another node's copy: the same signature), is the same dataset."""
    from autotune.config.files import read_yaml
    from autotune.dataset.paths import recorded_path

    if request.out_named or not out_path.is_file():
        return
    try:
        data = read_yaml(out_path, "config")
    except UserError:  # unreadable: foreign_problem has said so already
        return
    recorded = data.get("dataset") if isinstance(data, dict) else None
    if not isinstance(recorded, dict):
        return
    folder = recorded.get("path")
    if not isinstance(folder, str) or not folder or os.path.realpath(recorded_path(folder)) == os.path.realpath(dataset.root):
        return
    if recorded.get("signature") == dataset.signature():
        return
    out = printable(str(request.out))
    raise UserError(f"{out} holds the config for {printable(folder)}, not for {printable(dataset.root)}; pass --out {out} to replace it, "
                    "or --out another file")


def checked_outputs(request: RunRequest) -> Path:
    """``--out`` as a path, once it, ``--storage`` and ``--reports-dir`` are known to be writable: before the study
    and the set-up, not after them. Raises :class:`UserError` naming the flag."""
    if request.out == "-":  # the shell's "standard output": a file named '-' was written instead
        raise UserError("--out '-' would write a file named '-'; the config goes to a file (pass a name such as autotune.yaml), "
                        "and --json prints the run's summary on standard output")
    out_path = Path(request.out)
    store = sqlite_file(request.storage) or journal_file(request.storage)
    if store is not None and os.path.realpath(store) == os.path.realpath(out_path):  # the YAML would replace every study
        raise UserError(f"--out {str(out_path)!r} is the study storage (--storage {mask_url(request.storage)}); pass another file name such as autotune.yaml")
    # the text as given: 'configs/' names a folder, which Path() forgets
    problem = write_problem(request.out) or foreign_problem(out_path)
    if problem is not None:
        raise UserError(f"--out {str(request.out)!r} {problem}")
    problem = storage_problem(request.storage)  # the study's storage and the trial logs' folder: before the set-up too
    if problem is not None:
        raise UserError(f"--storage {mask_url(request.storage)} {problem}")
    problem = folder_problem(request.reports_dir)  # the trial logs go there from the first trial
    if problem is not None:
        raise UserError(f"--reports-dir {str(request.reports_dir)!r} {problem}")
    return out_path


def _paired(remeasure: str) -> bool:
    """Whether ``remeasure`` (``--remeasure``) asks for the paired re-measurement."""
    if remeasure not in REMEASURE:
        raise UserError(f"remeasure must be one of {', '.join(REMEASURE)}, but got {remeasure!r}")
    return remeasure == "paired"
