"""The next trial built beside this one.

On an H200 a DALI trial in a warm process still spent about 2.2-2.6 s building its pipeline (the decoders' set-up) and
then 1.5 s measuring it (benchmarks/gpu-logs/h200-2026-12-03-search-2/dali-padding-probe.log): the build, not the
measurement, decided how many configs a minute could see. So as trial k begins, the search asks the sampler for trial
k+1 and sends it to a second process with ``hold``: that process sets itself up, builds the loader (the pipeline and
its decoders; the first batch is decoded after ``"go"``) and waits. When trial k ends, k+1 gets ``"go"`` and its first
window comes a warm-up later.

Where it is built: in an idle warm process of its kind, or in a fresh one only while the pool has fewer than the two
it keeps a kind (at the start, or once one has ended), so that one measures while the other builds. A kept DALI process holds a GPU decoder
(``LoaderBackend.ready_device``), so its builds take 0.2-0.45 s where a fresh process's set-up and build take 2.5-3 s;
on an H100 a fresh one built beside a warm trial made that trial's windows wait 2.4-2.8 s, and default runs measured 9
and 8 configs with it where they measured 11 and 9 with nothing built ahead
(benchmarks/gpu-logs/h100-2026-12-06-search-6/ahead.log). Built only as here, two default runs measured 13 configs each
where two with nothing built ahead measured 8 and 7, and the windows beside a build waited 0-0.15 s
(benchmarks/gpu-logs/h100-2026-12-06-search-7).

What keeps this honest:

- Builds overlap builds, not timed windows. Trial k's windows wait for k+1's build to end (``TrialSpec.wait_for``,
  the file k+1 creates as its build ends or fails, ``TrialSpec.signal``; ``beside_wait_s``: the wait; at most
  ``one_rank.BESIDE_WAIT_S``, so that a build that hangs is not waited out), and nothing is built beside k+1, which
  has no build of its own left to overlap. A trial built ahead that is then not measured (a repeat, one of a kind
  that the trial beside it showed far slower than another) closes its loader, and its process goes back to the
  pool (``WarmPool.drop_ahead``): ended instead, a later build needed a fresh process, whose set-up made the
  trial beside it wait about 3 s on an H100 (seed 1 of benchmarks/gpu-logs/h100-2026-12-06-search-8/second/).
  When a build beside a trial's windows was allowed,
  the first trial of a default run (then the hardware-decoder start, with DALI's usual start built beside it) read under
  23k images/s in 6 of 11 runs on an H100 and an H200, and in 1 of 5 without; the same config re-measured in three
  interleaved rounds read 27.8-29.6k (benchmarks/gpu-logs/h100-2026-12-06-search).
- Only a kind that reuses its process (:func:`~autotune.trials.warm.reuse_key`: DALI's two) is built ahead: a torch
  DataLoader starts its workers as it is built, and they would load batches beside the trial being measured.
  A built trial waits without loading. The re-measurement of the contenders is never built ahead: paired, it takes
  the idle process of their kind (or a fresh one); fresh, each is a fresh process, measured alone.
- A trial built ahead says so (``built_ahead_s``: the seconds of its set-up and build, from its start), and its
  ``saved_s`` includes them, so the time budget prices a fresh re-measurement of it at what a fresh process takes.
  What the run says it hid is that, less what the trial beside it waited.
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
    (an idle warm process of its kind, or a fresh one while the pool has fewer than it keeps); whether it was sent. A
    kind that cannot be held is not."""
    key = reuse_key(spec)
    if key is None:
        return False
    with deferred_signals():  # a Ctrl-C meanwhile leaves no process unheld: it is delivered once the pool holds it
        wp = warm.take(key)
        if wp is None and warm.live(key) >= warm.per_kind:  # both busy: a fresh set-up would delay the windows beside it
            return False
        child = _Child(True)
        try:
            sent = child.begin(dataclasses.replace(spec, hold=True), wp, zygote)
        except Exception:
            child.end(None, None, None)
            raise
        if not sent:
            child.end(None, None, None)
            return False
        warm.hold(BuiltAhead(spec, child))
    return True
