"""The test-suite's fault injection: a trial process that crashes, hangs, runs out of memory or writes to its
output on purpose, so that the tests can check how the runner and the study take it.

Nothing in a normal run comes here: the trial's child imports this module only for a spec whose ``inject`` names
a fault (``TrialSpec.inject``; ``TuneSettings.inject`` maps trial numbers to faults), and only the tests set one.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import time
from typing import Any

#: memory an ``alloc:<MiB>`` fault holds
_held: list[Any] = []


def inject(fault: str | None) -> None:
    """Make the trial process (or its workers, or one of its ranks) fail as ``fault`` says.

    ``segfault``, ``hang``, ``signal:<N>`` (it kills itself with signal N): the trial process itself; ``crash``, ``oom-gpu``: it raises an error (a
    ``torch.cuda.OutOfMemoryError`` for ``oom-gpu``); ``alloc:<MiB>``: it allocates MiB of host memory, 32 MiB
    at a time, and holds it; ``worker-segfault``, ``worker-hang``: every torch DataLoader worker does so on
    its first sample, after making its ``pymp-*`` temporary folder (the trial process stays well); ``rank<R>-<fault>``:
    rank R's process does ``<fault>`` (:mod:`autotune.trials.rank_group`), the trial process and the other ranks stay well;
    ``sample-sleep:<ms>``: loading each sample (torch backend) takes that much longer, in the trial process
    and in its workers, without using the CPU; ``output``: a line written straight to file descriptors 1 and 2
    (as native libraries write theirs) and a Python warning, then the trial goes on as usual.
    """
    if not fault or fault.startswith("rank"):
        return
    if fault == "output":
        os.write(1, b"native stdout line from the trial process\n")
        os.write(2, b"native stderr line from the trial process\n")
        logging.getLogger("root").warning("a library warning from the trial process")
        return
    if fault == "segfault":
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    elif fault.startswith("signal:"):
        signum = int(fault.split(":", 1)[1])
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        time.sleep(5)
    elif fault == "hang":
        while True:
            time.sleep(1)
    elif fault == "crash":
        raise RuntimeError("injected crash")
    elif fault == "oom-gpu":
        import torch

        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (injected)")
    elif fault.startswith("alloc:"):
        mib = int(fault.split(":", 1)[1])
        hold = []
        for _ in range(0, mib, 32):
            hold.append(bytearray(b"\1" * (32 * 2**20)))  # touched pages: resident
            time.sleep(0.02)
        _held.append(hold)  # kept alive while the trial sleeps
        time.sleep(60)
    elif fault.startswith("sample-sleep:"):
        from autotune.loaders.backends._torch import FileListDataset

        delay = float(fault.split(":", 1)[1]) / 1000.0
        getitem = FileListDataset.__getitem__

        def slow(self: FileListDataset, index: int) -> Any:
            time.sleep(delay)  # like a slow disk: costs time, not CPU, whatever else runs on the machine
            return getitem(self, index)

        FileListDataset.__getitem__ = slow  # type: ignore[method-assign]  # the fault patches the class in this process
    elif fault in ("worker-segfault", "worker-hang"):
        from torch.utils.data import get_worker_info

        from autotune.loaders.backends._torch import FileListDataset

        getitem = FileListDataset.__getitem__

        def faulty(self: FileListDataset, index: int) -> Any:
            if get_worker_info() is not None:  # forked workers inherit this patch; the trial process does not run it
                import multiprocessing.util

                multiprocessing.util.get_temp_dir()  # its pymp-* folder, as a worker that has shared a tensor has
                inject(fault.removeprefix("worker-"))
            return getitem(self, index)

        FileListDataset.__getitem__ = faulty  # type: ignore[method-assign]  # as above; forked workers inherit it
    else:
        raise ValueError(f"unknown fault {fault!r}")
