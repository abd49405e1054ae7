"""The backend interface: build an iterable of ``(images, labels)`` batches on the target device."""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import torch

    from autotune.config.schema import LoaderConfig
    from autotune.dataset.scan import Dataset
    from autotune.loaders.presets import Preset


class BatchLoader(Iterable["tuple[torch.Tensor, torch.Tensor]"], abc.ABC):
    """What every backend returns.

    Contract (checked for every backend by ``tests/backends/test_contract.py``): each ``iter()`` is one epoch;
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

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release worker processes, threads and device memory."""


class LoaderBackend(abc.ABC):
    """One module per backend; a new backend adds a file and one line in ``backends/__init__.py``."""

    name: ClassVar[str]

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
