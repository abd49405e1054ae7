"""DDP shards: this process's rank, the two ``shard_id``/``num_shards`` mistakes, and the ranks' loaders compared.

Every rank of a DDP job must build the same epochs: the same batch size and number of batches (else the ranks wait
on each other at the end of the shorter epoch, for ever), over the same dataset (else the shards do not partition
one dataset), and with the torch backend the same seed (its ``DistributedSampler`` shuffles with it: another seed on
one rank and the shards overlap). A rank tuned apart (a YAML per node) or seeded with ``seed + rank`` breaks that
without any error; :func:`ranks_disagree` finds it when the loaders are built.

It uses the process group's key-value store, never a collective: each rank writes what its loader delivers and
reads what is there without waiting, so a rank that builds a loader the others do not (an evaluation loader on rank
0) never waits for them. The rank that writes last sees every rank's entry and raises (two ranks writing at once
may both raise); the others go on to their first collective, where the launcher ends them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

#: the process group the counts below are of, and how many sharded train loaders of each pipeline this process
#: built in it: the same count on every rank for the same loader
_group: int | None = None
_generation = 0  # process groups seen: the same on every rank, unlike the group's id
_built: dict[str, int] = {}


def running_rank() -> tuple[int, int] | None:
    """(rank, world size) of this process under DDP: the process group's, else torchrun's environment; None alone."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except (ImportError, RuntimeError, ValueError):
        pass
    try:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        return None


def shard_problem(shard_id: int, num_shards: int) -> str | None:
    """What is wrong with ``shard_id``/``num_shards`` for this DDP process (two mistakes that train on repeated
    data without any error), or None. A count other than 1 or the world size is taken as meant (data-parallel groups)."""
    running = running_rank()
    if running is None or running[1] <= 1:
        return None
    rank, world = running
    fix = f"pass shard_id=rank, num_shards=world_size (here shard_id={rank}, num_shards={world}), or use cfg.for_rank()"
    if num_shards == 1:
        return f"this process is rank {rank} of {world}, but the loader has one shard: every rank reads the whole dataset in the same order; {fix}"
    if num_shards == world and shard_id != rank:
        return (f"this process is rank {rank} of {world}, but reads shard {shard_id}: another rank reads it too "
                f"(LOCAL_RANK given for RANK?); {fix}")
    return None


#: the share of an epoch that the dropped last batch may take before it is told
DROP_WARN_SHARE = 0.1


def drop_problem(batch_size: int, images: int, where: str = "images per rank") -> str | None:
    """What a training epoch loses to its dropped last batch when that is more than :data:`DROP_WARN_SHARE` of it
    (``batch_size`` 256 over 300 images: 44 of them, every epoch), without the fix; None when it is less."""
    dropped = images % batch_size if 0 < batch_size <= images else 0
    if dropped <= DROP_WARN_SHARE * images:
        return None
    return f"batch size {batch_size} over {images} {where} drops the last {dropped} ({100 * dropped / images:.0f} %) of every epoch"


def _store() -> Any:
    """The process group's store when this process is one of a DDP group, else None."""
    try:
        import torch.distributed as dist
        from torch.distributed import distributed_c10d

        if not (dist.is_available() and dist.is_initialized()):
            return None
        return distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - a launcher without a default store: nothing to compare through
        return None


def _group_id() -> int | None:
    """This process's default process group, as an identity (to see it made again)."""
    try:
        from torch.distributed import distributed_c10d

        return id(distributed_c10d._get_default_group())
    except Exception:  # noqa: BLE001 - no group: nothing is compared anyway
        return None


def _ranks(ranks: list[int]) -> str:
    """``rank 0``, ``ranks 0-3``, ``ranks 0-5, 7``: ascending ranks as a short text, runs of three or more joined."""
    runs: list[list[int]] = []
    for r in ranks:
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    parts = [f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs]
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(parts)}"


#: what each rank's loader must share with the others' (the seed only where it shapes the shards: torch)
FIELDS = {
    "batch_size": "batch size",
    "batches": "batches an epoch",
    "pipeline": "pipeline",
    "images": "images",
    "dataset": "dataset",
    "seed": "seed",
    "device": "device",  # AutoLoader's ranks: where each delivers (device=None on a rank that sees no GPU)
}


def describe(*, batch_size: int, batches: int | None, pipeline: str, images: int, signature: str, seed: int | None) -> dict[str, Any]:
    """What one rank's loader delivers, as the ranks compare it; ``batches`` None where uneven shards may differ
    (eval keeps each shard's last partial batch), ``seed`` None where it does not shape the shards."""
    return {"batch_size": batch_size, "batches": batches, "pipeline": pipeline, "images": images, "dataset": signature[:12], "seed": seed}


def _differing(entries: list[dict[str, Any]]) -> dict[str, str]:
    """Each field on which the ranks' entries differ, with its text: ``batch size 256 (ranks 0-3), 128 (ranks 4-7)``."""
    out = {}
    for key, label in FIELDS.items():
        by_value: dict[str, list[int]] = {}
        for rank, entry in enumerate(entries):
            by_value.setdefault(json.dumps(entry.get(key)), []).append(rank)
        if len(by_value) > 1:
            shown = ", ".join(f"{'none' if json.loads(v) is None else json.loads(v)} ({_ranks(r)})" for v, r in by_value.items())
            out[key] = f"{label} {shown}"
    return out


def differences(entries: list[dict[str, Any]], keys: tuple[str, ...] | None = None) -> list[str]:
    """The texts of :func:`_differing` (of ``keys`` only, when given), in the order of :data:`FIELDS`."""
    return [text for key, text in _differing(entries).items() if keys is None or key in keys]


def ranks_disagree(entry: Callable[[], dict[str, Any]], num_shards: int, pipeline: str) -> str | None:
    """Why the DDP ranks' train loaders do not make one job's epochs, seen from this rank, or None.

    Compared only in a process group of ``num_shards`` ranks (a loader sharded over all of them), for a train
    pipeline (an evaluation loader may be built on some ranks alone, and its shards may differ by a batch). This
    rank writes ``entry()`` (:func:`describe`; called only then) to the group's store and reads the other ranks'
    entries for the same loader (this process's n-th train loader of ``pipeline`` in this group is theirs) without
    waiting: None while some rank has not built it yet.
    """
    global _group, _generation
    running = running_rank()
    store = _store()
    if running is None or store is None or num_shards <= 1 or running[1] != num_shards:
        return None
    rank, world = running
    group = _group_id()
    if group != _group:  # a process group made again: its loaders are counted afresh, under another key
        _group, _generation = group, _generation + 1
        _built.clear()
    _built[pipeline] = n = _built.get(pipeline, 0) + 1
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")  # an agent's store outlives a restarted attempt's workers
    keys = [f"autotune/loader/{attempt}/{_generation}/{pipeline}/{n}/{r}" for r in range(world)]
    try:
        store.set(keys[rank], json.dumps(entry()))
        if not store.check(keys):
            return None
        entries = [json.loads(store.get(k)) for k in keys]
    except Exception:  # noqa: BLE001 - a store that went away (a rank that ended): nothing to compare
        return None
    differ = _differing(entries)
    if not differ:
        return None
    why = []
    if differ.keys() & {"batch_size", "batches"}:
        why.append("the ranks with the shorter epoch would leave the others waiting at its end")
    if differ.keys() & {"images", "dataset", "pipeline"}:
        why.append("the shards would not split one dataset")
    if "seed" in differ:
        why.append("the shards would overlap (the DistributedSampler shuffles with the seed)")
    return (f"the {world} DDP ranks build different loaders: {'; '.join(differ.values())}; {', and '.join(why)}: build every rank's loader "
            f"from one YAML (rank 0's, copied to every node), on the same dataset, with the same seed")
