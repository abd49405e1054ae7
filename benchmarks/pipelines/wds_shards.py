"""Pipeline (d): WebDataset tar shards of the same images, read as an ``IterableDataset`` split among the
DataLoader's workers (``workersplitter=wds.split_by_worker``), decoded with torchvision and given pipeline (a)'s
transform.

The shards are written from ``$AUTOTUNE_BENCH_DATA`` when missing, beside it (``FOLDER-wds/``, or
``$AUTOTUNE_BENCH_SHARDS``): about 64 shards, so that every worker of a large machine has some.

    autotune run --dataset benchmarks/pipelines/wds_shards.py:train_set --batch-size 256     # AUTOTUNE_BENCH_DATA=/tmp/s8k
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch
import webdataset as wds
from _bench_images import data_dir, labelled_files
from torchvision.io import ImageReadMode, decode_jpeg
from tv_v2 import train_transform

SHARDS_ENV = "AUTOTUNE_BENCH_SHARDS"
MAX_SHARDS = 64
DONE = ".complete"


def shard_dir(root: Path) -> Path:
    return Path(os.environ.get(SHARDS_ENV) or f"{root}-wds")


def write_shards(root: Path, out: Path, shards: int = MAX_SHARDS) -> list[str]:
    """The tar shards of ``root``'s JPEGs in ``out`` (written once: a finished folder holds ``.complete``)."""
    if not (out / DONE).exists():
        files = labelled_files(root)
        n = max(1, min(shards, len(files) // 8))
        tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        for s in range(n):
            with wds.TarWriter(str(tmp / f"shard-{s:04d}.tar")) as sink:
                for i in range(s, len(files), n):
                    path, label = files[i]
                    sink.write({"__key__": f"{i:07d}", "jpg": Path(path).read_bytes(), "cls": str(label).encode()})
        (tmp / DONE).write_text(f"{len(files)} images in {n} shards\n")
        try:
            tmp.rename(out)  # whole or not at all: a second writer at the same time keeps the first one's
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return sorted(str(p) for p in out.glob("shard-*.tar"))


class DecodeAndTransform:
    """JPEG bytes to the training tensor (a class, so that the pipeline pickles for spawn and forkserver workers)."""

    def __init__(self) -> None:
        self.transform = train_transform()

    def __call__(self, data: bytes) -> Any:
        image = decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB)
        return self.transform(image)


def label(data: bytes) -> int:
    return int(data)


def train_set() -> Any:
    root = data_dir()
    urls = write_shards(root, shard_dir(root))
    return (wds.WebDataset(urls, shardshuffle=False, nodesplitter=wds.split_by_node, workersplitter=wds.split_by_worker, empty_check=False)
            .shuffle(1000)
            .to_tuple("jpg", "cls")
            .map_tuple(DecodeAndTransform(), label))
