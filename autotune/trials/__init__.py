"""The trial layer: run one config in a fresh child process and say how it went.

During the search, a kind that allows it measures its configs one after another in one warm child, or two taking
turns where trials are built ahead (:mod:`~autotune.trials.warm`); the paired re-measurement takes the idle one of
its kind where one is left, a fresh re-measurement starts fresh ones.

The parent side (:mod:`~autotune.trials.runner`, :mod:`~autotune.trials.warm`, :mod:`~autotune.trials.zygote`,
:mod:`~autotune.trials.tree`, :mod:`~autotune.trials.guard`)
never imports torch (the one exception: a model's memory traced when its ceiling measured one batch size of
several, :func:`~autotune.trials.model.estimate_gpu_mib`); the child side (:mod:`~autotune.trials.child`, :mod:`~autotune.trials.measure`,
:mod:`~autotune.trials.model`, :mod:`~autotune.trials.one_rank`, :mod:`~autotune.trials.rank_group`) builds the loader and measures it.
"""
