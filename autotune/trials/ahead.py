"""The next trial built while this one measures.

On an H200 a DALI trial in a warm process still spent about 2.2-2.6 s building its pipeline (the decoders' set-up) and
then 1.5 s measuring it (benchmarks/gpu-logs/h200-2026-12-03-search-2/dali-padding-probe.log): the build, not the
measurement, decided how many configs a minute could see. So while trial k measures, the search asks the sampler
for trial k+1 and sends it to a second process with ``hold``: that process sets itself up, builds the loader (the
pipeline and its decoders; the first batch is decoded after ``"go"``) and waits. When trial k ends, k+1 gets
``"go"`` and its first window comes a warm-up later.

What keeps this honest:

- Only a kind that reuses its process (:func:`~autotune.trials.warm.reuse_key`: DALI's two) is built ahead: a torch
  DataLoader starts its workers as it is built, and they would load batches beside the trial being measured.
- The build overlaps the measurement of the trial before; nothing else does. A built trial waits without loading.
  The re-measurement of the contenders is never built ahead: each is a fresh process, measured alone.
- A trial built ahead says so (``built_ahead_s``: the seconds its set-up and build overlapped), and its ``saved_s``
  includes them, so the time budget prices a fresh re-measurement of it at what a fresh process takes.
- It is built only when the search enables it (``TuneSettings.build_ahead``: on a CUDA device, where a build costs
  seconds and the cores are many), beside a trial of a kind built ahead itself (never beside a torch trial), for a
  sampled trial or a queued DALI start the queue allows (``Tuner._queue_allows_ask``), when the time budget has room
  for it after the current trial, and when both configs' memory estimates fit half of each budget (the monitor watches the trial measured,
  not the one waiting). The policy is the tuner's (``Tuner._build_next``); this module holds the process.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from autotune.trials.runner import _Child, deferred_signals
from autotune.trials.warm import BuiltAhead, reuse_key

if TYPE_CHECKING:
    from autotune.trials.guard import Budgets
    from autotune.trials.spec import TrialSpec
    from autotune.trials.warm import WarmPool
    from autotune.trials.zygote import Zygote


def halved(budgets: Budgets) -> Budgets:
    """Each memory budget halved: two trials at once (one measured, one built ahead) stay within the whole."""
    return dataclasses.replace(budgets, **{f: v / 2 for f in ("host_mib", "gpu_mib", "shm_mib") if (v := getattr(budgets, f)) is not None})


def build_ahead(spec: TrialSpec, *, warm: WarmPool, zygote: Zygote | None) -> bool:
    """Send ``spec`` to a process that builds its loader and holds it for :func:`~autotune.trials.runner.run_trial`
    (an idle warm process of its kind, or a fresh one); whether it was sent. A kind that cannot be held is not."""
    key = reuse_key(spec)
    if key is None:
        return False
    child = _Child(True)
    with deferred_signals():  # a Ctrl-C meanwhile leaves no process unheld: it is delivered once the pool holds it
        try:
            sent = child.begin(dataclasses.replace(spec, hold=True), warm.take(key), zygote)
        except Exception:
            child.end(None, None, None)
            raise
        if not sent:
            child.end(None, None, None)
            return False
        warm.hold(BuiltAhead(spec, child))
    return True
