"""The YAML schema, its reader and its writer: the one place the schema lives.

A config file holds the winning loader and the evidence for it::

    schema: 1
    created: ...
    dataset: {path, samples, classes, mean_bytes, signature}
    pipeline: imagenet-train
    device: cuda
    hardware: {...}                  # autotune.config.fingerprint
    loader: {backend, batch_size, torch: {...} | dali: {...}}
    torch_fallback: {batch_size, torch: {...}, samples_per_s, trial}   # only when DALI won: the best DataLoader
    result: {samples_per_s, spread, ...}
    study: {name, storage, trials, ...}
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
import operator
import os
import re
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from autotune.config.sections import (
    MAX_BATCH_SIZE,
    DaliOptions,
    TorchOptions,
    from_mapping,
    is_int,
    is_number,
    require,
)
from autotune.errors import ConfigError
from autotune.outcomes import Backend

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1

#: ``autotune.loaders.build_loader``, registered by that package (a layer above this one) when it is imported,
#: so that :meth:`RankConfig.build` can build a loader without the schema importing the loader factory.
_loader_factory: Callable[..., Any] | None = None


def register_loader_factory(factory: Callable[..., Any]) -> None:
    """Called once by :mod:`autotune.loaders`: the function :meth:`RankConfig.build` calls."""
    global _loader_factory
    _loader_factory = factory


class LoaderKind(Protocol):
    """What the schema asks of a kind of loader (:class:`autotune.loaders.backends.LoaderBackend` answers)."""

    @property
    def name(self) -> str: ...
    @property
    def options(self) -> type: ...
    @property
    def params(self) -> Mapping[str, str]: ...
    def describe(self, loader: LoaderConfig) -> str: ...
    def section(self, options: Any) -> dict[str, Any]: ...
    def dataloader_kwargs(self, loader: LoaderConfig) -> dict[str, Any] | None: ...


#: the kinds of loader by name (``autotune.loaders.backends.BACKENDS``), registered by that package when it is
#: imported, so that the schema reads and writes each kind's section without importing the loader layer
_kinds: Mapping[str, LoaderKind] = {}


def register_kinds(registry: Mapping[str, LoaderKind]) -> None:
    """Called once by :mod:`autotune.loaders.backends`: the registry :func:`kind` reads (a kind added to it later is known at once)."""
    global _kinds
    _kinds = registry


def kind(name: Any, where: str = "loader.backend") -> LoaderKind:
    """The registered kind of loader called ``name`` (a :class:`~autotune.outcomes.Backend` or its value)."""
    try:
        return _kinds[name.value if isinstance(name, Backend) else name]
    except (KeyError, TypeError):
        raise ConfigError(f"{where} must be one of {', '.join(_kinds)}, but got {name!r}") from None



#: ``result`` keys that hold a number (or null); ``spread``, ``scores`` and ``per_rank_samples_per_s`` hold lists of numbers.
RESULT_NUMBERS = (
    "samples_per_s", "defaults_samples_per_s", "heuristic_samples_per_s", "speedup_vs_defaults", "speedup_vs_heuristic",
    "dali_heuristic_samples_per_s", "speedup_vs_dali_heuristic",
    "startup_s", "peak_gpu_mib", "peak_host_mib", "model_ceiling_samples_per_s", "fraction_of_ceiling",
)


def _check_evidence(dataset: dict[str, Any], result: dict[str, Any]) -> None:
    path = dataset.get("path")
    require(path is None or isinstance(path, str), "dataset.path", "a folder name", path)
    for key, what in (("samples", "a whole number of images"), ("classes", "a whole number of classes"), ("mean_bytes", "a whole number of bytes")):
        v = dataset.get(key)  # at most 2**53 (a float holds it): 10**400 broke every comparison with an OverflowError
        require(v is None or (is_int(v) and 0 <= v <= 2**53), f"dataset.{key}", what, v)
    excluded = dataset.get("excluded")
    require(excluded is None or (isinstance(excluded, list) and all(isinstance(f, str) for f in excluded)), "dataset.excluded",
             "a list of file names", excluded)
    for k in RESULT_NUMBERS:  # rates, speedups, seconds, MiB and fractions: none is below zero
        v = result.get(k)
        require(v is None or (is_number(v) and v >= 0), f"result.{k}", "a number of at least 0", v)
    for k in ("spread", "scores", "per_rank_samples_per_s"):
        v = result.get(k)
        require(v is None or (isinstance(v, list) and all(is_number(x) and x >= 0 for x in v)), f"result.{k}", "a list of numbers of at least 0", v)
    ranks = result.get("ranks")
    require(ranks is None or (is_int(ranks) and ranks >= 1), "result.ranks", "an integer >= 1", ranks)
    load = result.get("other_load")  # other jobs' cores during the run: {cores, cpus, usable_cores}
    require(load is None or (isinstance(load, dict) and all(is_number(load.get(k)) for k in ("cores", "cpus", "usable_cores"))),
             "result.other_load", "a mapping of the numbers cores, cpus and usable_cores", load)



#: the kind of loader a parameter mapping stands for when it names none
DEFAULT_BACKEND = "torch"

#: the kind whose best config a YAML keeps as ``torch_fallback`` (DataLoader keywords) when another kind won
FALLBACK_BACKEND = "torch"

#: the kinds whose YAML section has a field of its own in :class:`LoaderConfig`; any other kind's is in ``section``
_FIELDS: dict[str, type] = {"torch": TorchOptions, "dali": DaliOptions}


def backend_of(params: Mapping[str, Any]) -> str:
    """The kind of loader a trial's flat parameters stand for: their ``backend``, torch when they name none."""
    return str(params.get("backend", DEFAULT_BACKEND))


def param_names() -> tuple[str, ...]:
    """The flat parameters a trial or a search space may set: ``backend``, ``batch_size`` and each kind's own."""
    return ("backend", "batch_size", *dict.fromkeys(p for k in _kinds.values() for p in k.params))


def __getattr__(name: str) -> Any:
    if name == "PARAM_NAMES":  # the kinds register when autotune.loaders is imported, after this module
        return param_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: where a config's batches go, as a YAML states it
DEVICE_RE = re.compile(r"cpu|cuda(:\d+)?")


def unused_params(params: dict[str, Any]) -> list[str]:
    """The keys of ``params`` that its backend (torch when not given) does not read: a dict written by hand with
    another backend's knob ran without it."""
    own = _kinds[backend_of(params)].params if backend_of(params) in _kinds else ()
    others = {p for k in _kinds.values() for p in k.params} - set(own)
    return [k for k in params if k in others]


def _field(backend: str) -> str:
    """The :class:`LoaderConfig` field that holds the section of the kind ``backend``."""
    return backend if backend in _FIELDS else "section"


def _not_used(given: str, backend: str) -> ConfigError:
    return ConfigError(f"loader.{given} is given, but loader.backend is {backend}, which would not use it; "
                       f"remove the {given} section, or set backend: {given}")


@dataclasses.dataclass(frozen=True)
class LoaderConfig:
    """The tuned loader: backend, batch size and that backend's options (its YAML section, ``loader.<backend>``).

    The torch and DALI sections have fields of their own; a kind of loader registered beyond them keeps its
    section in ``section``. :attr:`options` is the backend's section, whichever field holds it.
    """

    backend: Backend
    batch_size: int
    torch: TorchOptions | None = None
    dali: DaliOptions | None = None
    section: Any = None

    def __post_init__(self) -> None:
        k = kind(self.backend.value if isinstance(self.backend, Backend) else self.backend)
        object.__setattr__(self, "backend", Backend(k.name))
        require(is_int(self.batch_size), "loader.batch_size", "an integer", self.batch_size)
        own = _field(k.name)
        for name, cls in (*_FIELDS.items(), ("section", k.options)):  # a mapping is read as the YAML's section
            value = getattr(self, name)
            where = name if name != "section" else k.name
            if isinstance(value, dict):
                object.__setattr__(self, name, from_mapping(cls, value, f"loader.{where}"))
            elif value is not None and not isinstance(value, cls):
                raise ConfigError(f"loader.{where} must be an autotune.{cls.__name__} or a mapping of its fields, but got {type(value).__name__}")
        if not 1 <= self.batch_size <= MAX_BATCH_SIZE:
            raise ConfigError(f"loader.batch_size must be between 1 and {MAX_BATCH_SIZE}, but got {self.batch_size}")
        for name in (*_FIELDS, "section"):
            if name != own and getattr(self, name) is not None:  # a backend switched by hand: the other's options were silently not used
                raise _not_used(name, k.name)
        if getattr(self, own) is None:
            object.__setattr__(self, own, k.options())

    @property
    def options(self) -> Any:
        """The backend's section: :class:`TorchOptions`, :class:`DaliOptions`, or a registered kind's own."""
        return getattr(self, _field(self.backend.value))

    @classmethod
    def from_params(cls, params: object) -> LoaderConfig:
        """From a trial's flat parameters (``backend``, ``batch_size``, ``num_workers``, ``num_threads``, ...); anything
        else, a trial attribute written by another program included, is a :class:`ConfigError`."""
        if not isinstance(params, Mapping):
            raise ConfigError(f"loader parameters must be a mapping such as {{'backend': 'torch', 'batch_size': 64}}, but got {type(params).__name__}")
        k = kind(params.get("backend", DEFAULT_BACKEND), "backend")
        known = param_names()
        unknown = set(params) - set(known)
        if unknown:
            raise ConfigError(f"unknown loader parameter {sorted(unknown, key=str)[0]!r}; known: {', '.join(known)}")
        opts = k.options(**{field: params[p] for p, field in k.params.items() if p in params})
        return cls(Backend(k.name), int(params["batch_size"]), **{_field(k.name): opts})

    def to_params(self) -> dict[str, Any]:
        k = kind(self.backend.value)
        values = {p: getattr(self.options, field) for p, field in k.params.items()}
        return {"backend": self.backend.value, "batch_size": self.batch_size, **{p: v for p, v in values.items() if v is not None}}

    def describe(self) -> str:
        """A short human description, e.g. ``torch b=128 workers=16 pin prefetch=2``."""
        return kind(self.backend.value).describe(self)

    def to_dict(self) -> dict[str, Any]:
        k = kind(self.backend.value)
        return {"backend": self.backend.value, "batch_size": self.batch_size, k.name: k.section(self.options)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoaderConfig:
        if not isinstance(data, dict):
            raise ConfigError("loader must be a mapping with backend and batch_size")
        allowed = ("backend", "batch_size", *_kinds)
        unknown = set(data) - set(allowed)
        if unknown:
            raise ConfigError(f"unknown key loader.{sorted(unknown, key=str)[0]}; allowed keys are: {', '.join(allowed)}")
        k = kind(data.get("backend"))
        if not is_int(data.get("batch_size")):
            raise ConfigError(f"loader.batch_size must be an integer, but got {data.get('batch_size')!r}")
        given = [n for n in _kinds if data.get(n) is not None]
        sections = {n: from_mapping(_kinds[n].options, data[n], f"loader.{n}") for n in given}
        for n in given:
            if n != k.name:
                raise _not_used(n, k.name)
        return cls(Backend(k.name), data["batch_size"], **{_field(k.name): sections.get(k.name)})


#: the search spaces shipped in ``search_spaces/`` (``--space NAME``)
SHIPPED_SPACES = ("default", "torch", "dali", "cpu")

#: the most ranks (or shards, or ranks per node) a count may say: more is a typo or an overflowed variable
MAX_RANKS = 1 << 20


def whole_number(value: Any, name: str, what: str, least: int = 1, most: int = MAX_RANKS) -> int:
    """``value`` as an int from ``least`` to ``most``: an int, a numpy integer, or digits (``os.environ["LOCAL_WORLD_SIZE"]``).

    Raises:
        ConfigError: one line naming ``name``, what it counts, and the value.
    """
    try:
        n = int(value.strip()) if isinstance(value, str) else operator.index(value)
    except (TypeError, ValueError):
        n = least - 1
    if isinstance(value, bool) or n < least:
        raise ConfigError(f"{name} must be a whole number of {least} or more ({what}), but got {value!r}")
    if n > most:
        raise ConfigError(f"{name} must be a whole number from {least} to {most} ({what}), but got {value!r}")
    return n


def seed_number(value: Any) -> int | None:
    """A seed as numpy, torch and Optuna all take it: None, or a whole number from 0 to 2**32 - 1 (a numpy integer too).

    Raises:
        ConfigError: one line with the value.
    """
    if value is None:
        return None
    return whole_number(value, "seed", "up to 2**32 - 1, or None for a random one", least=0, most=2**32 - 1)


@dataclasses.dataclass(frozen=True)
class Config:
    """A whole ``autotune.yaml``. Sections other than ``loader`` are kept as plain mappings of evidence."""

    loader: LoaderConfig
    pipeline: str = "imagenet-train"
    device: str = "cpu"
    dataset: dict[str, Any] = dataclasses.field(default_factory=dict)
    hardware: dict[str, Any] = dataclasses.field(default_factory=dict)
    result: dict[str, Any] = dataclasses.field(default_factory=dict)
    study: dict[str, Any] = dataclasses.field(default_factory=dict)
    budgets: dict[str, Any] = dataclasses.field(default_factory=dict)
    measurement: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: when the winner is not the torch DataLoader: the best DataLoader the study measured, for users with their
    #: own ``Dataset`` (``{batch_size, torch: {...}, samples_per_s, trial}``); empty when there is none
    torch_fallback: dict[str, Any] = dataclasses.field(default_factory=dict)
    created: str = dataclasses.field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    schema: int = SCHEMA_VERSION
    path: str | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self) -> None:
        """A Config built by hand is checked as the YAML is: a dict for ``loader`` broke build_loader with an
        AttributeError deep inside it."""
        if isinstance(self.loader, dict):
            object.__setattr__(self, "loader", LoaderConfig.from_dict(self.loader))
        elif not isinstance(self.loader, LoaderConfig):
            raise ConfigError(f"loader must be an autotune.LoaderConfig or a mapping of the YAML's loader section, but got {type(self.loader).__name__}")
        for k in ("dataset", "hardware", "result", "study", "budgets", "measurement", "torch_fallback"):
            if not isinstance(getattr(self, k), dict):
                raise ConfigError(f"{k} must be a mapping, but got {type(getattr(self, k)).__name__}")
        if not (isinstance(self.device, str) and DEVICE_RE.fullmatch(self.device)):
            raise ConfigError(f"device must be cpu, cuda or cuda:N, but got {self.device!r}")

    # -- what training uses -------------------------------------------------------------------------
    @property
    def backend(self) -> Backend:
        return self.loader.backend

    @property
    def batch_size(self) -> int:
        return self.loader.batch_size

    def retune_flags(self) -> list[str]:
        """The ``autotune run`` flags this config was tuned with, beyond its dataset (``study.retune_flags``): what a
        re-tune passes again (``--if-stale``, ``check``'s advice). A YAML written before they were recorded gives
        what its other sections say: the pipeline, the ranks, a shipped space, the model."""
        flags = self.study.get("retune_flags")
        if isinstance(flags, list) and all(isinstance(f, str) for f in flags):
            return list(flags)
        out: list[str] = []
        if isinstance(self.pipeline, str) and self.pipeline != "imagenet-train":
            out += ["--pipeline", self.pipeline]
        if self.study.get("space") in SHIPPED_SPACES and self.study["space"] != "default":
            out += ["--space", self.study["space"]]
        ranks = self.result.get("ranks")
        if is_int(ranks) and ranks > 1 and ranks != self.hardware.get("gpus"):  # every visible GPU is the default: not a flag
            out += ["--gpus", str(ranks)]
        model = self.result.get("model")
        if isinstance(model, str) and model.strip():
            step = re.fullmatch(r"simulated (\S+) ms/step", model.strip())
            if step:
                out += ["--step-ms", step.group(1)]
            else:
                name, *opts = model.split()
                out += ["--model", name, *(["--amp"] if "bf16" in opts else []), *(["--channels-last"] if "channels_last" in opts else [])]
        return out

    def retune_command(self, path: str | os.PathLike[str], dataset: str | None = None) -> str:
        """The command that re-tunes this config into ``path`` as it was tuned: ``dataset`` (default: the recorded
        folder), :meth:`retune_flags`, the old config as the warm start."""
        import shlex

        data = dataset or self.dataset.get("path")
        flags = "".join(f" {shlex.quote(f)}" for f in self.retune_flags())
        q = shlex.quote(str(path))
        return f"autotune run --dataset {shlex.quote(str(data)) if data else 'DIR'}{flags} --warm-start {q} --out {q}"

    @property
    def excluded_files(self) -> tuple[str, ...]:
        """The files the study found undecodable and left out (``dataset.excluded``), relative to the dataset
        folder; :func:`autotune.build_loader` and ``autotune check`` leave them out too."""
        names = self.dataset.get("excluded") or []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ConfigError(f"{self.path or 'config'}: dataset.excluded must be a list of file names, but got {names!r}; "
                              "re-create the file with 'autotune run'")
        return tuple(names)

    @property
    def dataloader(self) -> LoaderConfig | None:
        """The torch DataLoader config: the winner when its backend has DataLoader keywords, else ``torch_fallback``
        (None if neither)."""
        if kind(self.loader.backend).dataloader_kwargs(self.loader) is not None:
            return self.loader
        return _fallback_loader(self.torch_fallback) if self.torch_fallback else None

    def dataloader_kwargs(self, **overrides: Any) -> dict[str, Any]:
        """Keywords for ``torch.utils.data.DataLoader(my_dataset, **kwargs)``.

        For a torch-backend config, the winner's. When DALI won, the best DataLoader config the same study
        measured (``torch_fallback``), for training with your own ``Dataset``; :func:`autotune.build_loader`
        builds the faster DALI loader. Raises when the study measured no DataLoader at all.
        """
        loader = self.dataloader
        kwargs = kind(loader.backend).dataloader_kwargs(loader) if loader is not None else None
        if kwargs is None:
            raise ConfigError(
                f"this config's backend is {self.loader.backend.value} and its study measured no torch DataLoader, so it has "
                "no DataLoader keywords; use autotune.build_loader(path, cfg), or re-tune with a space with the torch backend and more time "
                "(--budget) or trials (--n-trials)"
            )
        kwargs.update(overrides)
        wb = loader.options.joined_from(kwargs["batch_size"]) if loader is not None and isinstance(loader.options, TorchOptions) else None
        if wb and kwargs.get("num_workers"):
            raise ConfigError(f"this config's workers hand over {wb} samples at a time, joined into batches of {kwargs['batch_size']} (/dev/shm "
                              "is too small for whole batches), which DataLoader keywords cannot say; use autotune.build_loader(dataset, cfg), "
                              "which returns that DataLoader")
        if kwargs.get("num_workers") == 0:  # num_workers=0 to debug: DataLoader refuses the worker-only keywords
            for k in ("prefetch_factor", "persistent_workers"):
                if k not in overrides:
                    kwargs.pop(k, None)
        return kwargs

    def for_rank(self, rank: int | None = None, world_size: int | None = None, *, local_world_size: int | None = None) -> RankConfig:
        """What one rank of a DDP job uses: this loader on shard ``rank`` of ``world_size``.

        The config's loader is already the per-rank one (tuned with ``--gpus N``: N loaders at once, each
        with its share of the CPUs). Under torchrun the arguments default to ``RANK``, ``WORLD_SIZE`` and
        ``LOCAL_WORLD_SIZE`` from the environment. Warns when the ranks per node differ from the count the
        config was tuned for (``result.ranks``).
        """
        env = os.environ
        rank = whole_number(env.get("RANK", 0) if rank is None else rank, "rank", "this process's rank from 0; RANK under torchrun", least=0)
        world = env.get("WORLD_SIZE", 1) if world_size is None else world_size
        world_size = whole_number(world, "world_size", "the number of ranks; WORLD_SIZE under torchrun")
        if not 0 <= rank < world_size:
            raise ConfigError(f"rank must be between 0 and world_size - 1, but got rank={rank}, world_size={world_size}")
        local = env.get("LOCAL_WORLD_SIZE", world_size) if local_world_size is None else local_world_size
        local_world_size = whole_number(local, "local_world_size", "the ranks on this node; LOCAL_WORLD_SIZE under torchrun")
        local_rank = whole_number(env.get("LOCAL_RANK", rank % local_world_size), "local_rank", "this process's rank on its node; LOCAL_RANK under torchrun",
                                  least=0)
        if local_world_size > world_size or local_rank >= local_world_size:  # cuda:LOCAL_RANK must be one of this node's ranks
            raise ConfigError(f"local_rank={local_rank}, local_world_size={local_world_size} and world_size={world_size} do not fit together "
                              "(need local_rank < local_world_size <= world_size); check LOCAL_RANK, LOCAL_WORLD_SIZE and WORLD_SIZE, or the arguments")
        tuned = self.result.get("ranks")
        if tuned is not None and int(tuned) != int(local_world_size):
            warnings.warn(
                f"{self.path or 'this config'} was tuned for {tuned} rank(s) per node but {local_world_size} run here; "
                f"re-tune with 'autotune run --gpus {local_world_size}'",
                stacklevel=2,
            )
        device = f"cuda:{local_rank}" if self.device.startswith("cuda") else self.device
        return RankConfig(self, rank, world_size, local_rank, device)

    # -- YAML ---------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "created": self.created,
            "dataset": self.dataset,
            "pipeline": self.pipeline,
            "device": self.device,
            "hardware": self.hardware,
            "loader": self.loader.to_dict(),
            **({"torch_fallback": self.torch_fallback} if self.torch_fallback else {}),
            "result": self.result,
            "measurement": self.measurement,
            "budgets": self.budgets,
            "study": self.study,
        }

    @classmethod
    def from_dict(cls, data: Any, *, path: str | None = None) -> Config:
        where = f"{path}: " if path else ""
        if not isinstance(data, dict):
            raise ConfigError(f"{where}not an autotune config (expected a mapping with schema and loader); re-create it with 'autotune run'")
        allowed = {f.name for f in dataclasses.fields(cls)} - {"path"}
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise ConfigError(f"{where}unknown key {unknown[0]!r}; allowed keys are: {', '.join(sorted(allowed))}")
        schema = data.get("schema")
        if type(schema) is not int or schema != SCHEMA_VERSION:  # not true, nor 1.0: both equal 1 in Python
            raise ConfigError(f"{where}schema must be {SCHEMA_VERSION}, but got {schema!r}; re-create the file with this version's 'autotune run'")
        if "loader" not in data:
            raise ConfigError(f"{where}missing the 'loader' section; re-create the file with 'autotune run'")
        try:
            loader = LoaderConfig.from_dict(data["loader"])
        except ConfigError as e:
            raise ConfigError(f"{where}{e}") from None
        except TypeError as e:
            raise ConfigError(f"{where}bad loader section ({e})") from None
        kw = {k: v for k, v in data.items() if k != "loader"}
        if kw.get("torch_fallback") is not None:
            try:
                _fallback_loader(kw["torch_fallback"])
            except ConfigError as e:
                raise ConfigError(f"{where}{e}") from None
            except TypeError as e:
                raise ConfigError(f"{where}bad torch_fallback section ({e})") from None
        for k in ("dataset", "hardware", "result", "study", "budgets", "measurement", "torch_fallback"):
            if kw.get(k) is None:
                kw.pop(k, None)
            elif not isinstance(kw[k], dict):
                raise ConfigError(f"{where}{k} must be a mapping, but got {type(kw[k]).__name__}")
        try:
            _check_evidence(kw.get("dataset") or {}, kw.get("result") or {})
        except ConfigError as e:
            raise ConfigError(f"{where}{e}; re-create the file with 'autotune run'") from None
        if "created" in kw:
            kw["created"] = str(kw["created"])
        device = kw.get("device")
        if device is None:
            kw.pop("device", None)  # device: null reads as the default, as it always has
        elif not (isinstance(device, str) and DEVICE_RE.fullmatch(device)):
            raise ConfigError(f"{where}device must be cpu, cuda or cuda:N, but got {device!r}; re-create the file with 'autotune run'")
        pipeline = kw.get("pipeline")
        if pipeline is not None and not (isinstance(pipeline, str) and re.fullmatch(r"[a-z0-9][a-z0-9-]*", pipeline)):  # a preset's name
            raise ConfigError(f"{where}pipeline must be a pipeline's name such as imagenet-train, but got {pipeline!r}; re-create the file with 'autotune run'")
        return cls(loader=loader, path=path, **kw)


def _fallback_loader(data: Any) -> LoaderConfig:
    """The DataLoader config of a ``torch_fallback`` section (``batch_size`` and ``torch``; the rest is evidence)."""
    if not isinstance(data, dict):
        raise ConfigError(f"torch_fallback must be a mapping with batch_size and torch, but got {type(data).__name__}")
    unknown = sorted(set(data) - {"batch_size", "torch", "samples_per_s", "trial"})
    if unknown:
        raise ConfigError(f"unknown key torch_fallback.{unknown[0]}; allowed keys are: batch_size, samples_per_s, torch, trial")
    if isinstance(data.get("batch_size"), bool) or not isinstance(data.get("batch_size"), int):
        raise ConfigError(f"torch_fallback.batch_size must be an integer, but got {data.get('batch_size')!r}")
    try:
        return LoaderConfig(Backend.TORCH, data["batch_size"], torch=from_mapping(TorchOptions, data.get("torch") or {}, "torch_fallback.torch"))
    except ConfigError as e:  # the checks name the loader's fields; here they are the fallback's
        raise ConfigError(str(e).replace("loader.", "torch_fallback.", 1)) from None


@dataclasses.dataclass(frozen=True)
class RankConfig:
    """One rank's view of a config (:meth:`Config.for_rank`): the same loader, its shard and its device."""

    config: Config
    rank: int
    world_size: int
    local_rank: int
    device: str

    @property
    def shard_id(self) -> int:
        return self.rank

    @property
    def num_shards(self) -> int:
        return self.world_size

    @property
    def loader(self) -> LoaderConfig:
        return self.config.loader

    def dataloader_kwargs(self, **overrides: Any) -> dict[str, Any]:
        """DataLoader keywords for this rank; add ``sampler=self.sampler(ds)`` (or use :meth:`build`)."""
        return self.config.dataloader_kwargs(**overrides)

    def sampler(self, dataset: Any, *, shuffle: bool = True, seed: int = 0, drop_last: bool = False) -> Any:
        """A ``DistributedSampler`` over ``dataset`` for this rank (call ``set_epoch`` each epoch)."""
        from torch.utils.data import DistributedSampler

        return DistributedSampler(dataset, num_replicas=self.world_size, rank=self.rank, shuffle=shuffle, seed=seed, drop_last=drop_last)

    def build(self, path: str | os.PathLike[str], *, seed: int | None = None) -> Any:
        """``autotune.build_loader`` for this rank: its shard of the dataset at ``path``, on its device."""
        if _loader_factory is None:  # pragma: no cover - registered when the package is imported
            raise RuntimeError("autotune.loaders is not imported; import autotune first")
        return _loader_factory(path, self.config, device=self.device, shard_id=self.rank, num_shards=self.world_size, seed=seed)
