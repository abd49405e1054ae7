"""The starting points of a study: the baselines measured first, and a warm start fitted into the space.

The baselines are the framework defaults, the common heuristic and, where DALI is offered, DALI's usual starts;
the YAML reports the winner against them. A warm start is a previous winner, fitted into this space, with its
close neighbours.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from autotune.loaders.backends import BACKENDS

if TYPE_CHECKING:
    from autotune.study.settings import TuneSettings
    from autotune.study.space import SearchSpace

logger = logging.getLogger(__name__)


def baseline_configs(space: SearchSpace, settings: TuneSettings) -> dict[str, dict[str, Any]]:
    """Each kind of loader's usual starting points (the torch defaults and heuristic at the space's usual batch size,
    DALI's usual starts: :meth:`~autotune.loaders.backends.LoaderBackend.starting_points`), for the kinds the space
    offers and the reference kind (torch, whose defaults every speedup is against).

    They are measured first: the YAML reports the winner against the defaults, the heuristic and DALI's usual start
    (``dali-heuristic``), and all of them seed the sampler.
    """
    choices = space["batch_size"].choices if space["batch_size"].kind == "choices" else (int(space["batch_size"].low),)
    out: dict[str, dict[str, Any]] = {}
    for backend in BACKENDS.values():
        if backend.reference or backend.name in space.backends():
            out.update(backend.starting_points(space, batch_sizes=tuple(choices), cores=settings.cores, cuda=settings.device.startswith("cuda")))
    return out


def neighbours(params: dict[str, Any], space: SearchSpace, limit: int = 2) -> list[dict[str, Any]]:
    """Close neighbours of a config: one numeric knob one step up or down, within the space."""
    out = []
    for name in ("num_workers", "num_threads", "batch_size", "prefetch_queue_depth", "prefetch_factor"):
        if name not in params or name not in space:
            continue
        p = space[name]
        values = sorted(p.choices) if p.kind == "choices" else None
        v = params[name]
        for step in (+1, -1):
            if values is not None:
                if v not in values:
                    continue
                i = values.index(v) + step
                if not 0 <= i < len(values):
                    continue
                nv = values[i]
            else:
                nv = max(1, round(v * 2)) if step > 0 else max(int(p.low), v // 2)
                if not p.contains(nv) or nv == v:
                    continue
            out.append({**params, name: nv})
            if len(out) >= limit:
                return out
    return out


def fit_to_space(params: dict[str, Any], space: SearchSpace) -> dict[str, Any]:
    """The closest config the space allows (a config tuned elsewhere, e.g. for more cores or another batch size).

    A number outside a range is clamped; a value that is not among the choices becomes the nearest numeric
    choice, or the first choice. A fixed ``--batch-size`` (a single choice) therefore wins.
    """
    out = {name: space[name].nearest(v) if name in space else v for name, v in params.items()}
    if out != params:
        logger.info("warm start fitted into the space: %s -> %s", params, out)
    return out
