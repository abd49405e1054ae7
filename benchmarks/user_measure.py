"""One measurement of ``benchmarks/user_pipelines.py``, in a process of its own: the user's pipeline read with one
peer's settings, as a training script reads it.

A Dataset (``--kind torch``) is read by ``torch.utils.data.DataLoader(dataset, batch_size=B, shuffle=True, **kwargs)``
(no shuffle for an ``IterableDataset``), or with ``--config`` by ``autotune.build_loader(dataset, cfg)``; a DALI pipeline function (``--kind dali``) is built with
``batch_size=B, device_id=..., **kwargs`` and read by ``DALIGenericIterator``. Every tensor of each batch is moved to
``--device``. After ``--warmup`` batches, the samples delivered in a window of ``--window`` seconds are counted (epochs
start again as training's would). The result is one JSON line on stdout: ``{"samples_per_s", "samples", "seconds"}``.

    python -m user_measure --target benchmarks/pipelines/tv_v2.py:train_set --kind torch --kwargs '{"num_workers": 2}' \
        --batch-size 32 --device cpu          # run with benchmarks/ on PYTHONPATH, as user_pipelines.py does
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import harness  # first: puts the repository on sys.path (the checkout's autotune)


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", required=True, help="FILE.py:FUNC, the pipeline's function")
    p.add_argument("--kind", choices=("torch", "dali"), required=True)
    p.add_argument("--kwargs", default="{}", help="the peer's keywords (JSON): the DataLoader's, or the pipeline function's")
    p.add_argument("--config", default=None, help="a tuned YAML: the Dataset read by autotune.build_loader(dataset, cfg) instead (--kind torch)")
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--warmup", type=int, default=2, help="batches before the window")
    p.add_argument("--window", type=float, default=5.0, help="seconds counted")
    return p.parse_args(argv)


def torch_batches(target: str, kwargs: dict[str, Any], batch_size: int, config: str | None = None) -> Callable[[], Iterator[Any]]:
    """An epoch's batches of the user's Dataset through a DataLoader with ``kwargs``, each call a new epoch; with
    ``config`` (a tuned YAML), through ``autotune.build_loader(dataset, cfg)``, as the docs tell a user to train with it."""
    from torch.utils.data import DataLoader, IterableDataset

    from autotune.dataset.user import dataset_spec

    spec = dataset_spec(target)
    if config is not None:
        import autotune

        built = autotune.build_loader(spec, autotune.load_config(config))
        size = getattr(built, "joined_batch_size", built.batch_size)  # joined: the workers' smaller batches, joined
        if size not in (None, batch_size):  # the row says --batch-size: it must be what was read
            raise SystemExit(f"{config} builds batches of {size}, not --batch-size {batch_size}")
        return lambda: iter(built)
    stream = isinstance(spec.dataset, IterableDataset)
    extra = {"collate_fn": spec.collate_fn, "worker_init_fn": spec.worker_init_fn}
    kwargs = {**{k: v for k, v in extra.items() if v is not None}, **kwargs}
    worker_batch = kwargs.pop("worker_batch", None)  # a tuned config's, under a small /dev/shm: joined as build_loader joins them
    if worker_batch:
        from autotune.loaders.joined import JoinedLoader

        loader: DataLoader = JoinedLoader(spec.dataset, joined_batch_size=batch_size, batch_size=worker_batch, shuffle=not stream, **kwargs)
    else:
        loader = DataLoader(spec.dataset, batch_size=batch_size, shuffle=not stream, **kwargs)
    return lambda: iter(loader)


def dali_batches(target: str, kwargs: dict[str, Any], batch_size: int, device: str) -> Callable[[], Iterator[Any]]:
    """An epoch's batches of the user's DALI pipeline function built with ``kwargs``, each call a new epoch."""
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    from autotune.dataset.user import pipeline_function
    from autotune.loaders.backends._dali_user import output_names

    fn = pipeline_function(target)
    device_id = 0 if device.startswith("cuda") else None
    if device_id is None:
        kwargs = {k: v for k, v in kwargs.items() if k != "hw_decoder_load"}  # the mixed decoder's only
    pipe = fn(batch_size=batch_size, device_id=device_id, **kwargs)
    pipe.build()
    it = DALIGenericIterator([pipe], list(output_names(fn)), reader_name="Reader", auto_reset=True, last_batch_policy=LastBatchPolicy.DROP)
    return lambda: iter(it)


def forever(epoch: Callable[[], Iterator[Any]]) -> Iterator[Any]:
    """Batches, epoch after epoch."""
    while True:
        got = False
        for batch in epoch():
            got = True
            yield batch
        if not got:
            raise RuntimeError("the loader delivered no batch in a whole epoch (fewer samples than one batch?)")


def measure(batches: Iterator[Any], device: str, warmup: int, window: float, non_blocking: bool) -> dict[str, float]:
    """Samples per second delivered to ``device`` in a window of ``window`` seconds after ``warmup`` batches."""
    from autotune.loaders.backends._user import batch_length, to_device

    move = device != "cpu"
    for _ in range(warmup):
        batch = next(batches)
        if move:
            to_device(batch, device, non_blocking)
    harness.cuda_sync(device)
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < window:
        batch = next(batches)
        if move:
            batch = to_device(batch, device, non_blocking)
        n += batch_length(batch)
    harness.cuda_sync(device)
    took = time.perf_counter() - t0
    return {"samples_per_s": n / took, "samples": n, "seconds": took}


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    kwargs = json.loads(a.kwargs)
    if a.config and a.kind != "torch":
        raise SystemExit("--config reads a Dataset through autotune.build_loader: it needs --kind torch")
    if a.kind == "torch":
        epoch = torch_batches(a.target, kwargs, a.batch_size, a.config)
    else:
        epoch = dali_batches(a.target, kwargs, a.batch_size, a.device)
    batches = forever(epoch)
    result = measure(batches, a.device, a.warmup, a.window, non_blocking=bool(kwargs.get("pin_memory")))
    batches.close()  # the workers end here, before the process does
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
