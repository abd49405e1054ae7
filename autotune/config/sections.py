"""The YAML sections of the built-in kinds of loader (``loader.torch``, ``loader.dali``, ``loader.user``,
``loader.dali_user``): one frozen dataclass each, under the framework's own argument names, and the checks every
section shares. A kind of loader names its section class in its backend
(:attr:`autotune.loaders.backends.LoaderBackend.options`)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, TypeGuard

from autotune.errors import ConfigError


def is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)  # YAML's true is an int to Python


def is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) if isinstance(value, float) else abs(value) < 2**1023  # an int too large for a float is no figure


def require(ok: bool, name: str, kind: str, value: Any) -> None:
    if not ok:
        shown = repr(value)
        raise ConfigError(f"{name} must be {kind}, but got {shown if len(shown) <= 60 else shown[:40] + f'... ({len(shown)} characters)'}")


def from_mapping(cls: type, data: Any, where: str) -> Any:
    """Build a dataclass from a mapping; unknown keys are an error naming the key."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a mapping, but got {type(data).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"unknown key {where}.{unknown[0]}; allowed keys are: {', '.join(sorted(names))}")
    return cls(**data)


#: the least and the most each loader knob may be in a YAML (a prefetch of 10**12 batches would hang the first
#: batch; no machine has more workers or threads than this). A search space offers less (prefetch up to 64); a
#: hand-tuned YAML may hold more.
#: the largest batch a loader is built for: more is no loader to measure or train with (its memory is refused)
MAX_BATCH_SIZE = 1 << 20

KNOB_BOUNDS: dict[str, tuple[int, int]] = {
    "num_workers": (0, 16384),
    "prefetch_factor": (1, 1024),
    "num_threads": (1, 16384),
    "prefetch_queue_depth": (1, 1024),
}


def bounded(section: str, name: str, value: int) -> None:
    lo, hi = KNOB_BOUNDS[name]
    if not lo <= value <= hi:
        raise ConfigError(f"loader.{section}.{name} must be between {lo} and {hi}, but got {value}")


@dataclasses.dataclass(frozen=True)
class TorchOptions:
    """``torch.utils.data.DataLoader`` keywords, under their own names."""

    #: the YAML section these options are read from (in messages)
    section_name: ClassVar[str] = "torch"

    num_workers: int = 0
    pin_memory: bool = False
    prefetch_factor: int | None = None  # only with num_workers > 0
    persistent_workers: bool = False  # only with num_workers > 0
    #: samples a worker hands over at a time, joined into batches in the main process (autotune.loaders.joined), where
    #: /dev/shm cannot hold the workers' whole batches; None: whole batches, as the DataLoader hands them over
    worker_batch: int | None = None

    def __post_init__(self) -> None:
        require(is_int(self.num_workers), f"loader.{self.section_name}.num_workers", "an integer", self.num_workers)
        require(isinstance(self.pin_memory, bool), f"loader.{self.section_name}.pin_memory", "true or false", self.pin_memory)
        require(isinstance(self.persistent_workers, bool), f"loader.{self.section_name}.persistent_workers", "true or false", self.persistent_workers)
        require(self.prefetch_factor is None or is_int(self.prefetch_factor), f"loader.{self.section_name}.prefetch_factor", "an integer or null",
                self.prefetch_factor)
        bounded(self.section_name, "num_workers", self.num_workers)
        if self.prefetch_factor is not None and self.num_workers > 0:
            bounded(self.section_name, "prefetch_factor", self.prefetch_factor)
        if self.num_workers == 0 and (self.prefetch_factor is not None or self.persistent_workers):
            # DataLoader rejects these without workers; normalise rather than fail at training time.
            object.__setattr__(self, "prefetch_factor", None)
            object.__setattr__(self, "persistent_workers", False)
        wb = self.worker_batch
        require(wb is None or (is_int(wb) and wb >= 1), f"loader.{self.section_name}.worker_batch", "a positive integer or null", wb)
        if self.num_workers == 0:
            object.__setattr__(self, "worker_batch", None)

    def joined_from(self, batch_size: int) -> int | None:
        """The samples each worker hands over where batches of ``batch_size`` are joined from smaller ones
        (:mod:`autotune.loaders.joined`); None: the workers hand over whole batches."""
        wb = self.worker_batch  # None without workers (see above); one as large as the batch joins nothing
        return wb if wb and wb < batch_size else None


#: DALI's usual share of JPEGs for the hardware decoder, where a config names none
DEFAULT_HW_DECODER_LOAD = 0.65


@dataclasses.dataclass(frozen=True)
class DaliOptions:
    """DALI pipeline arguments, under DALI's own names (``device`` is where JPEGs are decoded: gpu = ``mixed``)."""

    device: str = "cpu"  # gpu | cpu
    num_threads: int = 2
    prefetch_queue_depth: int = 2
    hw_decoder_load: float | None = None  # the hardware JPEG decoder's share: GPU decode only (None for cpu)

    def __post_init__(self) -> None:
        for name in ("num_threads", "prefetch_queue_depth"):
            require(is_int(getattr(self, name)), f"loader.dali.{name}", "an integer", getattr(self, name))
        require(self.hw_decoder_load is None or is_number(self.hw_decoder_load), "loader.dali.hw_decoder_load", "a number", self.hw_decoder_load)
        if self.device not in ("gpu", "cpu"):
            raise ConfigError(f"loader.dali.device must be 'gpu' or 'cpu', but got {self.device!r}")
        bounded("dali", "num_threads", self.num_threads)
        bounded("dali", "prefetch_queue_depth", self.prefetch_queue_depth)
        load = self.hw_decoder_load
        if load is not None and (isinstance(load, bool) or not isinstance(load, (int, float)) or not 0.0 <= load <= 1.0):
            raise ConfigError(f"loader.dali.hw_decoder_load must be between 0 and 1, but got {load!r}")
        # only GPU decode has a hardware decoder; the share is a step of 0.05, written without float noise
        object.__setattr__(self, "hw_decoder_load", None if self.device == "cpu" else round(float(DEFAULT_HW_DECODER_LOAD if load is None else load), 3))



#: the ways a DataLoader may start its workers (``multiprocessing_context``)
START_METHODS = ("fork", "forkserver", "spawn")


@dataclasses.dataclass(frozen=True)
class UserOptions(TorchOptions):
    """``torch.utils.data.DataLoader`` keywords for the user's own Dataset: the torch section's, the start method of
    the workers (``multiprocessing_context``, None: the platform's) and ``in_order`` (None: the DataLoader's default)."""

    section_name: ClassVar[str] = "user"

    multiprocessing_context: str | None = None
    in_order: bool | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        ctx = self.multiprocessing_context
        if ctx is not None and ctx not in START_METHODS:
            raise ConfigError(f"loader.user.multiprocessing_context must be one of {', '.join(START_METHODS)} or null, but got {ctx!r}")
        require(self.in_order is None or isinstance(self.in_order, bool), "loader.user.in_order", "true, false or null", self.in_order)
        if self.num_workers == 0:
            object.__setattr__(self, "multiprocessing_context", None)


@dataclasses.dataclass(frozen=True)
class DaliUserOptions:
    """The arguments autotune passes to the user's own DALI pipeline function, under DALI's names: ``num_threads``,
    ``prefetch_queue_depth``, and ``hw_decoder_load`` where the function takes it (None: not passed)."""

    num_threads: int = 2
    prefetch_queue_depth: int = 2
    hw_decoder_load: float | None = None

    def __post_init__(self) -> None:
        for name in ("num_threads", "prefetch_queue_depth"):
            require(is_int(getattr(self, name)), f"loader.dali_user.{name}", "an integer", getattr(self, name))
            bounded("dali_user", name, getattr(self, name))
        load = self.hw_decoder_load
        require(load is None or is_number(load), "loader.dali_user.hw_decoder_load", "a number or null", load)
        if load is not None:
            if not 0.0 <= load <= 1.0:
                raise ConfigError(f"loader.dali_user.hw_decoder_load must be between 0 and 1, but got {load!r}")
            object.__setattr__(self, "hw_decoder_load", round(float(load), 3))
