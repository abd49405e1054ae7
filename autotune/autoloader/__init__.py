"""Tune while training: :class:`AutoLoader` finds the loader inside the user's own training loop.

Modules, top to bottom: ``_loader`` (the switching iterator) over ``_writes`` (rank 0's study and YAML writes, off
the loop) over ``_setup`` (dataset, device, batch sizes, the YAML check) over ``_source`` (the Optuna study: what to
try next) over ``_explore`` (when a candidate is done, dropped or the winner), ``_plan`` (one permutation per epoch,
exactly-once bookkeeping) and ``_agree`` (DDP).
"""

from autotune.autoloader._explore import Exploration
from autotune.autoloader._loader import AutoLoader

__all__ = ["AutoLoader", "Exploration"]
