"""The trial layer: run one config in a fresh child process and say how it went.

The parent side (:mod:`~autotune.trials.runner`, :mod:`~autotune.trials.zygote`, :mod:`~autotune.trials.guard`)
never imports torch (the one exception: a model's memory traced when its ceiling measured one batch size of
several, :func:`~autotune.trials.model.estimate_gpu_mib`); the child side (:mod:`~autotune.trials.child`, :mod:`~autotune.trials.measure`,
:mod:`~autotune.trials.model`, :mod:`~autotune.trials.one_rank`, :mod:`~autotune.trials.rank_group`) builds the loader and measures it.
"""
