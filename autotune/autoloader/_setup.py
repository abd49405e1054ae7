"""Before the first batch: the dataset, the device, the batch sizes, the seed every rank shares, and whether a
YAML already settles the question (:func:`matching_config`, the fingerprint check of ``autotune check``)."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
import operator
import os
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.config import fingerprint
from autotune.config.files import read_yaml
from autotune.config.schema import Config, LoaderConfig, backend_of, seed_number, unused_params, whole_number
from autotune.config.staleness import assess
from autotune.dataset.scan import Dataset, scan
from autotune.dataset.user import DatasetSpec, UserDataset, given, in_process, unguarded_main
from autotune.errors import UserError, expect
from autotune.loaders.backends import BACKENDS, backend_for, get_backend
from autotune.loaders.factory import check_device
from autotune.loaders.presets import get_preset
from autotune.loaders.shards import drop_problem

if TYPE_CHECKING:
    from autotune.autoloader._agree import Agreement
    from autotune.autoloader._explore import Exploration
    from autotune.autoloader._source import CandidateSource

logger = logging.getLogger(__package__)  # autotune.autoloader, not its private modules

DEFAULT_BATCH = 256


@dataclasses.dataclass
class Setup:
    dataset: Dataset
    pipeline: str
    drop_last: bool
    device: str
    seed: int
    batch_size: int
    batch_choices: tuple[int, ...] | None  # None: free (the YAML's or the default); one value: fixed
    settled: dict[str, Any] | None  # the matching YAML's loader parameters
    space: Any = None
    carry_on: dict[str, Any] | None = None  # a matching YAML's exploration that training cut short: what it left (see cut_short)
    shm_mib: float | None = None  # the /dev/shm a loader may use: the least of every rank's node (None: no /dev/shm)


def _device(device: str | None) -> str:
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available():
            raise UserError("device 'cuda' asked for, but torch sees no GPU; pass device='cpu'")
        return f"cuda:{torch.cuda.current_device()}"  # under DDP: the GPU this rank set with torch.cuda.set_device
    return check_device(device)  # cpu, or cuda:N with that GPU here; anything else one line


def check_arguments(*, path: Any, device: Any, config: Any, pipeline: Any, space: Any, candidates: Any, storage: Any,
                    study_name: Any, with_indices: Any, exploration: Any) -> list[dict[str, Any]]:
    """One line for an argument of the wrong type, before anything starts (``budget_s`` and ``batch_size`` are
    checked where they are read; the storage by rank 0 alone, in :func:`start_source`). Returns the candidates as a
    list of dicts (any mappings given, in any iterable)."""
    import torch

    from autotune.autoloader._explore import Exploration

    nothing = type(None)
    expect(path, "path", (str, os.PathLike), "the dataset folder's path or your own Dataset")
    expect(device, "device", (str, torch.device, nothing), "'cuda', 'cuda:N', 'cpu', a torch.device or None")
    expect(config, "config", (str, os.PathLike, nothing), "a YAML's path, or None to read and write none")
    expect(pipeline, "pipeline", str, "a preset's name such as 'imagenet-train'")
    expect(space, "space", (str, os.PathLike), "a search space's name or YAML path such as 'default'")
    expect(storage, "storage", (str, nothing), "a storage URL such as 'sqlite:///autotune.db', or None to keep the study in memory")
    expect(study_name, "study_name", (str, nothing), "a study's name, or None for one made from the dataset")
    if with_indices not in (True, False):  # numpy's bools too
        raise UserError(f"with_indices must be True or False, but got {type(with_indices).__name__} {with_indices!r:.60}")
    expect(exploration, "exploration", (Exploration, nothing), "an autotune.Exploration or None")
    items = None if isinstance(candidates, (str, bytes, Mapping)) or not isinstance(candidates, Iterable) else list(candidates)
    if items is None or not all(isinstance(c, Mapping) for c in items):
        raise UserError(f"candidates must be a list of dicts of loader parameters (such as {{'backend': 'torch', 'num_workers': 4}}), "
                        f"but got {type(candidates).__name__} {candidates!r:.60}")
    out = [dict(c) for c in items]
    for i, c in enumerate(out):  # found now, not as a skipped candidate minutes into training
        try:
            LoaderConfig.from_params({"batch_size": 1, **c})
        except (UserError, ValueError, TypeError) as e:
            raise UserError(f"candidates[{i}] {c!r:.80} is not a loader config: {e}") from None
        unused = unused_params(c)
        if unused:
            backend, owner = backend_of(c), next(n for n, b in BACKENDS.items() if unused[0] in b.params)
            raise UserError(f"candidates[{i}] sets {', '.join(unused)}, which the {backend} backend does not use"
                            + (f" ({backend} is the backend when none is given)" if "backend" not in c else "")
                            + f"; drop {'it' if len(unused) == 1 else 'them'}, or set backend {owner}")
    return out


def rules_of(exploration: Any, *, budget_s: Any, max_slowdown: Any) -> Any:
    """The :class:`Exploration` an AutoLoader follows: ``exploration``'s (or the defaults), with ``budget_s`` and
    ``max_slowdown`` where given; one set in both places (the Exploration's not at its default) to two values is
    refused, as one would be ignored."""
    from autotune.autoloader._explore import Exploration

    given = {k: v for k, v in (("budget_s", budget_s), ("max_slowdown", max_slowdown)) if v is not None}
    dataclasses.replace(Exploration(), **given)  # a value of the wrong kind is said as such, before any comparison
    defaults = Exploration()
    for k, v in given.items():  # an Exploration at its default for k (given for its other fields) yields to v
        if exploration is not None and getattr(exploration, k) != getattr(defaults, k) and getattr(exploration, k) != v:
            raise UserError(f"{k} is given twice: AutoLoader({k}={v!r}) and Exploration({k}={getattr(exploration, k)!r}); pass it once")
    return dataclasses.replace(exploration or Exploration(), **given)


def storage_check(storage: str | None) -> str | None:
    """``storage`` as the study is kept in (rank 0, before it opens it): None, Optuna's in-memory storage, for an
    in-memory SQLite URL (each of SQLite's connections would get its own empty database); one line when it cannot
    keep the study."""
    from autotune.study.storage import in_memory, mask_url, storage_problem

    if not storage or in_memory(storage):
        return None
    problem = storage_problem(storage)
    if problem is not None:
        raise UserError(f"storage {mask_url(storage)!r} {problem}".replace("--storage", "the storage URL"))
    return storage


def _batch_choices(batch_size: int | Sequence[int] | None) -> tuple[int, ...] | None:
    if batch_size is None:
        return None
    items = tuple(batch_size) if isinstance(batch_size, (list, tuple, range)) else (batch_size,)
    try:  # ints or numpy integers (np.int64 from a config); not floats, not text
        values = tuple(operator.index(b) for b in items)
    except TypeError:
        values = ()
    if not values or any(isinstance(b, bool) for b in items) or min(values) < 1:
        raise UserError(f"batch_size must be a positive integer or a list of them, but got {batch_size!r}")
    return values


def matching_config(path: str | None, dataset: Dataset, *, pipeline: str, device: str, batch_choices: tuple[int, ...] | None,
                    current: dict[str, Any], per_rank: int | None = None) -> tuple[dict[str, Any] | None, str, int | None]:
    """The YAML's loader parameters when it still holds here, else None; why not; and the YAML's batch size.

    It holds when this machine's fingerprint and the dataset match the recorded ones in every field that matters
    (what ``autotune check`` asks), and the pipeline, the kind of device and the batch size are those asked for.

    Raises:
        ConfigError: the file exists but is not an autotune config (it is never overwritten).
    """
    if path is None:
        return None, "no config file given", None
    if not Path(path).exists():
        return None, f"{path} does not exist", None
    cfg = Config.from_dict(read_yaml(path, "config"), path=str(path))
    reasons = [str(d) for d in assess(cfg, current, compare_dataset=False) if d.matters]
    reasons += [str(d) for d in fingerprint.diff_dataset(cfg.dataset, dataset.summary()) if d.matters]
    if cfg.pipeline != pipeline and not isinstance(dataset, UserDataset):  # the user's own transforms: the preset says only
        reasons.append(f"pipeline {cfg.pipeline} -> {pipeline}")  # whether the last partial batch is dropped (user_source)
    kind = "cuda" if device.startswith("cuda") else "cpu"
    if ("cuda" if cfg.device.startswith("cuda") else "cpu") != kind:
        reasons.append(f"device {cfg.device} -> {kind}")
    if batch_choices is not None and cfg.loader.batch_size not in batch_choices:
        reasons.append(f"batch size {cfg.loader.batch_size} -> {'/'.join(map(str, batch_choices))}")
    elif (per_rank is not None and get_preset(pipeline).train and cfg.loader.batch_size > per_rank  # every epoch would be empty
          and not any(r.startswith("loader.batch_size:") for r in reasons)):
        reasons.append(f"batch size {cfg.loader.batch_size} is larger than the {per_rank} {dataset.unit} per rank")
    if not get_backend(cfg.loader.backend).available():
        reasons.append(f"{get_backend(cfg.loader.backend).label} is not installed")
    if reasons:
        return None, "; ".join(reasons), cfg.loader.batch_size
    return cfg.loader.to_params(), "matches", cfg.loader.batch_size


def _attempt(comm: Agreement, compute) -> tuple[Any, BaseException | None, tuple[str, Any]]:
    """``compute()`` on this rank: its value, its error, and what the other ranks are told of it."""
    try:
        value = compute()
        return value, None, ("ok", value)
    except Exception as e:  # noqa: BLE001 - told to the other ranks, then raised here as it was
        return None, e, ("user-error" if isinstance(e, UserError) else "error", f"rank {comm.rank}: {e}")


def _raise_told(told: tuple[str, Any]) -> None:
    """Raise, on this rank, the error another rank was told of (nothing for ``ok``)."""
    if told[0] != "ok":
        raise (UserError if told[0] == "user-error" else RuntimeError)(told[1])


def agreed(comm: Agreement, compute) -> Any:
    """Rank 0 computes, every rank gets the value; an error on rank 0 is raised on every rank."""
    value, error, told = _attempt(comm, compute) if comm.leader else (None, None, ("ok", None))
    told = comm.broadcast(told)
    if error is not None:
        raise error
    _raise_told(told)
    return told[1]


def together(comm: Agreement, compute) -> Any:
    """Every rank computes its own value; an error on any rank is raised on every rank. A rank that failed alone
    before a collective (a dataset folder missing on one node) left the others waiting in it until the timeout."""
    value, error, told = _attempt(comm, compute)
    failed = [t for t in comm.gather(("ok", None) if error is None else told) if t[0] != "ok"]  # not each rank's value
    if error is not None:
        raise error
    if failed:
        _raise_told(failed[0])
    return value


def _dataset(path: Any) -> Dataset:
    """The Dataset object given to this process under ``path`` (a stream of unknown length is 0 long: not falsy here), else the folder's scan."""
    found = given(path)
    return found if found is not None else scan(path)


def resolve(comm: Agreement, config_path: str | None, path: str | os.PathLike[str], *, device: str | None, batch_size: int | Sequence[int] | None,
            pipeline: str, space: str, seed: int | None) -> Setup:
    """Everything the loader needs before its first batch; the same on every rank."""
    from autotune.study.space import load_space

    preset = get_preset(pipeline)
    choices, dev, dataset = together(comm, lambda: (_batch_choices(batch_size), _device(device), _dataset(path)))
    _ranks_alike(comm, dataset, dev)
    stream = getattr(dataset, "iterable", False)  # an IterableDataset: its length unknown, or not what an epoch holds
    if stream and comm.world > 1:
        raise UserError("AutoLoader over an IterableDataset under DDP is not supported yet (ranks would read epochs of different lengths); "
                        "tune it with autotune.tune(dataset, batch_size=N) and train from autotune.build_loader(dataset, cfg)")
    per_rank = len(dataset) // comm.world  # 0 for a stream of unknown length
    if not stream and per_rank < 1:
        raise UserError(f"the dataset has {len(dataset)} images, fewer than the {comm.world} ranks; use more images")
    sized = preset.train and not stream  # what the batch size drops is known (a stream's workers each cut their own)
    seed = seed_number(seed)  # one line for a seed numpy or Optuna would refuse mid-training
    seed = agreed(comm, lambda: seed if seed is not None else random.SystemRandom().randrange(2**31))
    current = fingerprint.collect()
    shm = shm_budget(comm)

    def match() -> tuple[dict[str, Any] | None, int | None, dict[str, Any] | None]:
        found = matching_config(config_path, dataset, pipeline=pipeline, device=dev, batch_choices=choices, current=current,
                                per_rank=None if stream else per_rank)
        carry_on = cut_short(config_path) if found[0] is not None else None
        if carry_on is not None:  # it matches, but its exploration ended with training: explore on, in its study
            logger.warning("%s was settled as training ended while exploring (after %s s and %s candidates): exploring on in study %s; "
                           "it is rewritten when exploration ends", config_path, carry_on["exploration_s"], carry_on["candidates_tried"], carry_on["study"])
            return None, found[2], carry_on
        params, recorded = _log_match(found, config_path)
        if params is not None:  # tuned where /dev/shm was larger (it is no part of the match): fitted to this one
            loader = shm_fitter(dataset, pipeline, dev, local_world(comm), shm)(LoaderConfig.from_params(params))
            if loader is None:
                logger.warning("%s: /dev/shm here (%.0f MiB for this node's loaders) cannot hold its workers' batches, not even one sample "
                               "at a time: exploring again", config_path, shm)
                return None, recorded, None
            fitted = loader.to_params()
            if fitted != params and fitted.get("worker_batch"):
                logger.warning("%s: /dev/shm here holds too little for its workers' whole batches; they hand over %s samples each, joined "
                               "in order", config_path, fitted["worker_batch"])
            params = fitted
        return params, recorded, None

    settled, recorded, carry_on = agreed(comm, match)
    if settled is not None:
        dropped = drop_problem(int(settled["batch_size"]), per_rank, f"{dataset.unit} per rank" if comm.world > 1 else dataset.unit) if sized else None
        if dropped is not None and comm.rank == 0:  # what build_loader says of the same YAML
            logger.warning("%s; pass a batch_size that divides them more closely (the YAML is then explored again at that size)", dropped)
        return Setup(dataset, pipeline, preset.train, dev, seed, int(settled["batch_size"]), choices, settled, shm_mib=shm)
    if choices is None:  # the batch size of the YAML explored again (changing it changes the optimisation), else 256
        choices = (min(recorded or DEFAULT_BATCH, per_rank) if sized else recorded or DEFAULT_BATCH,)
    if sized and all(b > per_rank for b in choices):
        raise UserError(f"every batch size ({', '.join(map(str, choices))}) is larger than the {per_rank} {dataset.unit} per rank; pass a smaller batch_size")
    fitting = tuple(b for b in choices if b <= per_rank) if sized else choices
    dropped = drop_problem(fitting[0], per_rank) if sized else None
    if dropped is not None and comm.rank == 0:  # a small set at the default 256: say what training loses
        logger.warning("%s; pass a batch_size that divides them more closely", dropped)
    sp = together(comm, lambda: load_space(space, cores=_cores(comm), device=dev))  # a space file one node lacks
    if getattr(dataset, "pickles", True) is False and "multiprocessing_context" in sp:  # a Dataset object that does not pickle
        sp = sp.restrict("multiprocessing_context", ("fork",))
    elif "multiprocessing_context" in sp and (script := unguarded_main()) is not None:  # its spawned workers would train again
        if comm.rank == 0:
            logger.warning("%s trains without an 'if __name__ == \"__main__\":' guard, so workers started by spawn or forkserver would "
                           "run it again: only fork workers are tried; put the training under that guard to try them too", script)
        sp = sp.restrict("multiprocessing_context", ("fork",))
    sp = sp.fix("batch_size", fitting[0])  # fixed by default; a list given by the user is the set to choose from
    if len(fitting) > 1:
        sp = dataclasses.replace(sp, params=tuple(dataclasses.replace(q, choices=fitting) if q.name == "batch_size" else q for q in sp.params))
    return Setup(dataset, pipeline, preset.train, dev, seed, fitting[0], fitting, None, sp, carry_on, shm)


def cut_short(path: str | None) -> dict[str, Any] | None:
    """What a YAML whose exploration training cut short left to do (``result.exploration_cut_short``): its study's
    name, the seconds explored and the candidates tried; None for a YAML whose exploration ended on its own."""
    if path is None:
        return None
    cfg = Config.from_dict(read_yaml(path, "config"), path=str(path))
    r = cfg.result
    if not r.get("exploration_cut_short") or not cfg.study.get("name"):
        return None
    spent, tried = r.get("exploration_s"), r.get("candidates_tried")
    return {"study": str(cfg.study["name"]), "exploration_s": float(spent) if isinstance(spent, (int, float)) else 0.0,
            "candidates_tried": int(tried) if isinstance(tried, int) else 0}


def _ranks_alike(comm: Agreement, dataset: Dataset, device: str) -> None:
    """One line on every rank when the ranks scanned different datasets (a folder per node that differs): rank 0's
    plan split its images among ranks that read other files, and the first collective failed on a size mismatch.
    Likewise when they deliver to different kinds of device (``device=None`` on a rank that sees no GPU)."""
    from autotune.loaders.shards import differences

    entries = comm.gather({"images": len(dataset), "dataset": dataset.signature()[:12], "device": device.split(":")[0]})
    diffs = differences(entries, ("images", "dataset"))
    if diffs:
        raise UserError(f"the {comm.world} DDP ranks read different datasets: {'; '.join(diffs)}; pass every rank the same dataset "
                        f"folder, with the same files")
    diffs = differences(entries, ("device",))
    if diffs:
        raise UserError(f"the {comm.world} DDP ranks deliver to different kinds of device: {diffs[0]}; give every rank its GPU "
                        f"(torch.cuda.set_device(local_rank) on a node whose ranks all see one), or pass device='cpu' on every rank")


def _log_match(result: tuple[dict[str, Any] | None, str, int | None], path: str | None) -> tuple[dict[str, Any] | None, int | None]:
    """``(params or None, the YAML's batch size or None)``; a YAML about to be explored again is named in a warning."""
    params, why, recorded = result
    if params is None and recorded is not None:
        logger.warning("%s does not match (%s): exploring again; it is rewritten when exploration ends", path, why)
    elif params is None:
        logger.info("no tuned config to build: %s", why)  # exploring, unless budget_s is 0
    return params, recorded


def local_world(comm: Agreement) -> int:
    """The ranks on this node: ``LOCAL_WORLD_SIZE`` under torchrun, else all ranks (a bad value is one line)."""
    return whole_number(os.environ.get("LOCAL_WORLD_SIZE", comm.world), "LOCAL_WORLD_SIZE", "the ranks on this node; set by torchrun")


def _cores(comm: Agreement) -> int:
    return max(1, fingerprint.usable_cpus() // local_world(comm))


def shm_budget(comm: Agreement) -> float | None:
    """The ``/dev/shm`` a loader may use (the share of what is free now, as a study's trial may): the least over
    every rank's node, so that the config every rank builds fits the smallest. Every rank calls it."""
    from autotune.trials.guard import default_budgets

    found = [v for v in comm.gather(default_budgets(host_mib=0.0).shm_mib) if v is not None]
    return min(found) if found else None


def shm_fitter(dataset: Dataset, pipeline: str, device: str, ranks: int, budget: float | None) -> Callable[[LoaderConfig], LoaderConfig | None]:
    """What fits a candidate to ``budget`` MiB of ``/dev/shm`` (:func:`~autotune.loaders.memory.fit_shm`): in a
    container's 64 MiB the workers hand over smaller batches, joined in order, where whole ones would crash every
    loader with workers. The node's ranks share it. None for a config that does not fit even so (AutoLoader has no
    memory guard to stop it: it would crash, or leave the loop waiting on a batch lost with the shared memory)."""
    from autotune.loaders.memory import estimate, fit_shm

    def fit(loader: LoaderConfig) -> LoaderConfig | None:
        fitted = fit_shm(loader, dataset, budget, pipeline, device, ranks)
        if budget is not None and float(estimate(fitted, dataset, pipeline, device, ranks)["shm_mib"]) > budget:
            return None
        return fitted

    return fit


def start_source(comm: Agreement, rules: Exploration, s: Setup, *, candidates: Sequence[dict[str, Any]], storage: str | None,
                 study_name: str | None) -> CandidateSource:
    """Rank 0 opens the study (in the usual storage, with the attributes ``autotune run`` records)."""
    from autotune.autoloader._source import CandidateSource, study_name_for

    storage = storage_check(storage)
    current = fingerprint.collect()
    kind = "cuda" if s.device.startswith("cuda") else "cpu"
    key = fingerprint.key(current, f"{s.dataset.signature()}|{s.pipeline}|{s.space.name}|{comm.world}|autoloader")
    first = [{**c, "batch_size": c.get("batch_size", s.batch_size)} for c in candidates]
    attrs = {
        "fingerprint_key": key,
        "dataset": s.dataset.summary(),
        "pipeline": s.pipeline,
        "device": kind,
        "hardware": current,
        "measurement": {"warmup_batches": rules.warmup_batches, "measure_batches": rules.measure_batches,
                        "statistic": "training-loop seconds per sample after warm-up" + comm.slowest, "in_training": True},
        "budgets": {"budget_s": rules.budget_s, "max_slowdown": rules.max_slowdown},
        "space": s.space.name,
        "sampler": "tpe",
        "pruner": f"slower than {rules.max_slowdown:g}x the best",
        "ranks": local_world(comm),
        "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    return CandidateSource(s.space, storage=storage, study_name=study_name or study_name_for(s.dataset, key), attrs=attrs, named=study_name is not None,
                           seed=s.seed, device=s.device, cores=_cores(comm), first=first, carry_on=s.carry_on["study"] if s.carry_on else None,
                           fit=shm_fitter(s.dataset, s.pipeline, s.device, local_world(comm), s.shm_mib))


def check_candidates(candidates: Sequence[dict[str, Any]], s: Any) -> None:
    """Raise for a candidate that could only fail here: a batch size the exploration does not take, or a config its
    kind of loader cannot deliver to the device with. ``s`` is :func:`resolve`'s answer."""
    for i, c in enumerate(candidates):
        b = c.get("batch_size")
        if b is not None and s.batch_choices is not None and b not in s.batch_choices:  # it overrode a fixed batch, or gave empty epochs
            raise UserError(f"candidates[{i}] sets batch_size {b!r}, but this AutoLoader explores batch size {'/'.join(map(str, s.batch_choices))} "
                            "(the batch_size argument, at most the images per rank); leave batch_size out of the candidate, or pass "
                            "batch_size=[...] to explore several")
        unfit = backend_for(c).unfit(c, str(s.device))
        if unfit:
            raise UserError(f"candidates[{i}] {unfit}")
        started = c.get("multiprocessing_context")
        if started in ("spawn", "forkserver") and c.get("num_workers") and (script := unguarded_main()) is not None:
            raise UserError(f"candidates[{i}] starts {started} workers, but {script} trains without an 'if __name__ == \"__main__\":' guard, "
                            "so each would run it again; put the training under that guard, or use fork")


def check_writable(comm: Any, config_path: str | None) -> None:
    """Raise, on every rank, when ``config_path`` could not be written after exploring."""
    if config_path is None:
        return
    from autotune.config.files import write_problem

    problem = agreed(comm, lambda: write_problem(config_path))
    if problem is not None:
        raise UserError(f"config {config_path!r} {problem} (or config=None to write nothing)")


def undecodable(e: BaseException) -> str | None:
    """The file a decoding error of the dataset's own (``BadImageError``, in this process or a DataLoader worker's)
    names, printable; None for any other failure."""
    from autotune.dataset.imaging import BadImageError
    from autotune.dataset.paths import printable
    from autotune.trials.child import bad_image_path

    if not (isinstance(e, BadImageError) or "BadImageError" in str(e)):
        return None
    path = bad_image_path(str(e))
    return printable(path) if path else None


def one_line(e: BaseException) -> str:
    """``Type: first line of the message``, for a warning."""
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".strip()


def user_source(dataset: Any, *, collate_fn: Any, drop_last: bool | None, space: str, with_indices: bool,
                shuffle: bool | None) -> tuple[str, str, str, bool]:
    """A Dataset object given in place of a folder: the name it goes by in this process, the preset whose ``train``
    is ``drop_last`` (the dataset's own transforms apply; the preset says only whether the last partial batch is
    dropped), the search space (``user`` for ``default``) and whether to shuffle (``None``: a map-style dataset is
    shuffled, a stream is read in its own order; ``shuffle=True`` over a stream is refused, as DataLoader refuses it).
    An IterableDataset is first checked to split its stream among workers (one line when it does not)."""
    if with_indices:
        raise UserError("with_indices=True is for a dataset folder; with your own Dataset, return each sample's index in its item")
    if isinstance(dataset, DatasetSpec) and collate_fn is not None:
        raise UserError("collate_fn is given twice: in the DatasetSpec and to AutoLoader; pass it once")
    spec = dataset if isinstance(dataset, DatasetSpec) or collate_fn is None else DatasetSpec(dataset, collate_fn=collate_fn)
    if shuffle not in (True, False, None):
        raise UserError(f"shuffle must be True, False or None, but got {type(shuffle).__name__} {shuffle!r:.60}")
    ds = in_process(spec)
    if ds.iterable and shuffle:
        raise UserError(f"shuffle=True over an IterableDataset ({ds.qualname}): its order is the stream's own, as DataLoader has it; "
                        "shuffle inside its __iter__ and leave shuffle out (or pass shuffle=False)")
    return ds.root, "imagenet-train" if drop_last else "imagenet-eval", "user" if space == "default" else space, not ds.iterable if shuffle is None else shuffle


def user_loader(dataset: Dataset, loader: LoaderConfig, *, device: str, seed: int, rank: int, world: int, shuffle: bool, drop_last: bool) -> Any:
    """The settled loader over a Dataset object: its DataLoader with the tuned knobs, shuffled and cut as asked (each
    rank its part, under DDP), every batch moved to ``device``."""
    from torch.utils.data import DistributedSampler

    from autotune.dataset.user import dataset_spec
    from autotune.loaders.backends._user import UserLoader, dataloader

    spec = dataset_spec(dataset.root)
    sampler: Any = DistributedSampler(spec.dataset, num_replicas=world, rank=rank, shuffle=shuffle, seed=seed, drop_last=True) if world > 1 else None
    return UserLoader(dataloader(spec, loader.options, loader.batch_size, device, shuffle=shuffle, drop_last=drop_last, seed=seed, sampler=sampler), device)
