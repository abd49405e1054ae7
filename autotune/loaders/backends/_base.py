"""The backend interface: what a kind of loader knows (its YAML section, its search parameters and starting points,
its memory, threads and buffered batches) and how it builds an iterable of ``(images, labels)`` batches on the
target device."""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch

    from autotune.config.schema import LoaderConfig
    from autotune.dataset.scan import Dataset
    from autotune.loaders.presets import Preset


class BatchLoader(Iterable["tuple[torch.Tensor, torch.Tensor]"], abc.ABC):
    """What every backend returns.

    Contract (checked for every backend by ``tests/loaders/backends/test_contract.py``): each ``iter()`` is one epoch;
    ``len()`` is the number of batches in an epoch; every batch is ``(images, labels)`` with images a float32
    ``N x 3 x crop x crop`` tensor normalized with the preset's mean and std, labels int64 class indices in
    ``ImageFolder`` order, both on ``device``. The last partial batch is dropped for train presets and kept for
    eval presets.
    """

    device: str

    @abc.abstractmethod
    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]: ...

    @abc.abstractmethod
    def __len__(self) -> int: ...

    def close(self) -> None:  # an optional hook
        """Release worker processes, threads and device memory."""


#: a CUDA context and torch's allocator slack, in MiB: what any loader that delivers to a GPU holds there
CUDA_CONTEXT_MIB = 500


@dataclasses.dataclass(frozen=True)
class MemorySizes:
    """What a memory estimate is made of (:func:`autotune.loaders.memory.estimate`); sizes in MiB but ``file_bytes``."""

    batch_size: int
    crop: int
    file_bytes: int  # one encoded image: the dataset's mean file
    decoded_mib: float  # one decoded uint8 RGB image
    out_batch_mib: float  # one delivered batch: float32, 3 x crop x crop per image
    cuda: bool  # batches go to a GPU


@dataclasses.dataclass
class MemoryParts:
    """A config's memory for one loader, by part, in MiB: on the host, on the GPU, and the host's share in /dev/shm."""

    host: dict[str, float] = dataclasses.field(default_factory=dict)
    gpu: dict[str, float] = dataclasses.field(default_factory=dict)
    shm: float = 0.0


class LoaderBackend(abc.ABC):
    """One kind of loader: everything that differs between kinds, in one module each.

    A new kind is a module with a subclass, one line in :data:`autotune.loaders.backends.BACKENDS`, its YAML section
    (a frozen dataclass, :attr:`options`) and its tests. Only :meth:`build` may import the kind's framework (torch,
    DALI): the rest is read by the study, which imports neither. The hooks default to what a kind without buffered
    batches, threads or GPU decode would say.
    """

    #: ``loader.backend`` in a YAML, ``backend`` in a trial's parameters, and the key of the YAML section
    name: ClassVar[str]
    #: the frozen dataclass of the YAML section ``loader.<name>``: the kind's options, under its framework's names
    options: ClassVar[type]
    #: flat trial parameter (what a search space names) -> its field in :attr:`options`
    params: ClassVar[Mapping[str, str]] = {}
    #: the values a search space may give each of :attr:`params`: ``(kind, least, most)`` with kind ``int``,
    #: ``number``, ``bool`` or ``device`` (cpu or gpu); a parameter not named takes any value
    space_rules: ClassVar[Mapping[str, tuple[str, float | None, float | None]]] = {}
    #: how messages name the kind
    label: ClassVar[str]
    #: how to install what the kind needs when :meth:`available` is false
    install: ClassVar[str] = ""
    #: whether its starting points are measured in every study, even one whose space does not offer the kind
    #: (the torch defaults: what every speedup is against)
    reference: ClassVar[bool] = False
    #: what ``autotune doctor`` builds to read one batch of 4: check name -> (flat parameters, device)
    smoke_checks: ClassVar[Mapping[str, tuple[dict[str, Any], str]]] = {}
    #: whether :meth:`preload` may run in a process that forks ranks afterwards
    preload_before_fork: ClassVar[bool] = False
    #: whether its decoder's errors may not name the file (then the trial looks for the undecodable file itself)
    decode_errors_unnamed: ClassVar[bool] = False
    #: whether one trial process may measure its configs one after another (:mod:`autotune.trials.warm`): its import
    #: and device set-up, seconds a trial, are then paid once (and by the paired re-measurement, which takes it)
    reuses_process: ClassVar[bool] = False
    #: whether its trial process uses torchvision (and PIL): the trials' pre-imported process imports them before
    #: forking such a trial (:data:`autotune.trials.zygote.LATER`)
    needs_torchvision: ClassVar[bool] = True

    # -- the YAML section ------------------------------------------------------------------------------
    def describe(self, loader: LoaderConfig) -> str:
        """A short human description, e.g. ``torch b=128 workers=16 pin prefetch=2``."""
        shown = " ".join(f"{p}={v}" for p, v in loader.to_params().items() if p not in ("backend", "batch_size"))
        return f"{self.name} b={loader.batch_size}" + (f" {shown}" if shown else "")

    def section(self, options: Any) -> dict[str, Any]:
        """The YAML section ``loader.<name>`` of ``options``: its fields that are set."""
        return {k: v for k, v in dataclasses.asdict(options).items() if v is not None}

    def dataloader_kwargs(self, loader: LoaderConfig) -> dict[str, Any] | None:
        """``torch.utils.data.DataLoader`` keywords for ``loader``; None for a kind that is no DataLoader (the YAML's
        ``torch_fallback`` answers ``Config.dataloader_kwargs`` then)."""
        return None

    # -- the search space and the study ------------------------------------------------------------------
    def available(self) -> bool:
        """Whether the kind's framework imports here (without importing it)."""
        return True

    def fit_space(self, space: Any, device: str) -> Any:
        """``space`` (a :class:`~autotune.study.space.SearchSpace`) without the choices this kind cannot take on
        ``device`` (GPU decode without a GPU). Raises :class:`~autotune.errors.SpaceError` when none is left."""
        return space

    def starting_points(self, space: Any, *, batch_sizes: tuple[int, ...], cores: int, cuda: bool) -> dict[str, dict[str, Any]]:
        """The kind's usual starting configs by role (``defaults``, ``heuristic``, ...) as flat parameters: measured
        first, reported against, and seeding the sampler. ``space`` is the study's, ``batch_sizes`` its choices."""
        return {}

    def threads(self, params: Mapping[str, Any]) -> int:
        """The CPU threads or processes a config (flat parameters) spends on loading."""
        return 0

    def decode_threads(self, params: Mapping[str, Any]) -> int | None:
        """The CPU threads or processes a config's images are decoded and transformed on, where only they do that
        work (its rate then grows at most in proportion to them); None where a GPU decodes, or the kind cannot say."""
        return None

    def start_up_only(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The knobs of a config (flat parameters) that change only how its loading starts, not its rate once started,
        each with the value that starts it soonest (:func:`autotune.study.evidence.later_start`); none by default."""
        return {}

    def unfit(self, params: Mapping[str, Any], device: str) -> str | None:
        """Why a config (flat parameters) cannot deliver to ``device``, as ``decodes on ..., but the batches go to
        ...; use ...``; None when it can."""
        return None

    # -- the memory guard --------------------------------------------------------------------------------
    def buffered_batches(self, loader: LoaderConfig) -> int:
        """How many batches ``loader`` can hold ready before they are asked for."""
        return 0

    def memory(self, loader: LoaderConfig, sizes: MemorySizes) -> MemoryParts:
        """The memory one loader of this config needs, by part (the process itself is counted by the caller)."""
        parts = MemoryParts(host={"consumer": sizes.out_batch_mib})
        if sizes.cuda:
            parts.gpu.update(cuda_context=CUDA_CONTEXT_MIB, batches_on_gpu=2 * sizes.out_batch_mib)
        return parts

    def memory_fix(self, loader: LoaderConfig) -> str:
        """The knobs that set how many batches ``loader`` holds, with their values and how to lower them, as the end
        of the sentence ``... (batch size B, <this>``."""
        return "no batches held ahead); lower the batch size"

    # -- a loader at work -----------------------------------------------------------------------------------
    #: whether it decodes with :func:`autotune.dataset.imaging.open_rgb` in the training process or its workers, whose
    #: ``BadImageError`` names the file (then every kind fails on that file too: the data, not the config, is at fault)
    decodes_with_open_rgb: ClassVar[bool] = False

    def starts_once(self, loader: LoaderConfig) -> bool:
        """Whether ``loader``'s workers outlive an epoch (the first ``iter()`` starts them, later ones reuse them)."""
        return False

    def restarts_each_epoch(self, loader: LoaderConfig) -> bool:
        """Whether every epoch starts ``loader``'s workers again (a DataLoader's workers that do not persist): a trial's
        rate then pays that start once an epoch, as training does."""
        return False

    # -- the trial process -------------------------------------------------------------------------------
    def preload(self) -> None:  # noqa: B027 - optional hook
        """Import what :meth:`build` needs, ahead of the time it is measured in."""

    def ready_device(self, device: str) -> float:
        """What a trial process kept for later trials does once for ``device`` (its context started) before its first
        build: set-up that its later trials then find done, counted as the process's start-up rather than a build's.
        Returns the seconds of it that each build pays in a process without it (``ready_s``: priced back where a
        re-measurement's fresh process builds without it); 0.0 for none."""
        return 0.0

    @abc.abstractmethod
    def build(
        self,
        dataset: Dataset,
        preset: Preset,
        loader: LoaderConfig,
        device: str,
        *,
        shard_id: int = 0,
        num_shards: int = 1,
        seed: int | None = None,
        indices: Sequence[int] | None = None,
    ) -> BatchLoader:
        """Build the loader that training will use (and the study measures).

        ``indices``, when given, are positions in ``dataset``: the loader reads exactly these samples, in this
        order, once per ``iter()``, with no shuffling and no sharding of its own (the caller owns the order and
        gives each rank its own positions; ``shard_id``/``num_shards`` are then ignored). This is how
        :class:`autotune.AutoLoader` builds a loader over the part of an epoch not yet delivered.
        """


def decode_error_file(text: str) -> str | None:
    """The image file named in a decoder's error message (DALI names it), or None."""
    import re

    from autotune.dataset.scan import IMG_EXTENSIONS

    exts = "|".join(e.lstrip(".") for e in IMG_EXTENSIONS)
    m = re.search(rf"(/[^\s'\"]+\.(?:{exts}))\b", text, flags=re.IGNORECASE)
    return m.group(1) if m else None
