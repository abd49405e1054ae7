"""What runs inside a trial's child process: build the loader, measure it, report peaks."""

from __future__ import annotations

import logging
import os
import re
import signal
import time
import traceback
from typing import TYPE_CHECKING, Any

from autotune.outcomes import Outcome
from autotune.trials import logs
from autotune.trials.one_rank import signal_built

if TYPE_CHECKING:
    from collections.abc import Callable

    from autotune.trials.measure import OnWindow
    from autotune.trials.spec import TrialSpec

logger = logging.getLogger(__name__)


def find_bad_file(dataset: Any, budget_s: float = 30.0) -> str | None:
    """The first file of ``dataset`` that PIL cannot decode, looking for at most ``budget_s`` seconds.

    DALI's decoders do not always name the file that failed (the GPU decoder reports the batch); this
    decodes each file at 1/8 scale (JPEG draft mode still reads every byte, so truncation shows).
    """
    from PIL import Image

    deadline = time.monotonic() + budget_s
    for path in dataset.files:
        if time.monotonic() > deadline:
            logger.info("no undecodable file found within %.0f s", budget_s)
            return None
        try:
            with Image.open(path) as img:
                img.draft("RGB", (max(1, img.width // 8), max(1, img.height // 8)))
                img.load()
        except Exception:  # noqa: BLE001 - PIL's many error types: this file does not decode
            return path
    return None


def execute(spec: TrialSpec, on_window: OnWindow, hold: Callable[[], None] | None = None) -> dict[str, Any]:
    """Build ``spec``'s loader on its device, measure it and return the result payload; ``hold``: see
    :func:`~autotune.trials.one_rank.measure_rank` (one rank only).

    Several ranks are forked from here, one process each, before anything touches CUDA
    (:mod:`autotune.trials.rank_group`); one rank is measured in this process, and so are paired loaders
    (:mod:`autotune.trials.paired`).
    """
    inject = _fault_injection(spec)
    if inject is not None:
        inject(spec.inject)
    import torch

    from autotune.trials.one_rank import measure_rank
    from autotune.trials.rank_group import measure_ranks

    if spec.seed is not None:
        torch.manual_seed(spec.seed)
    if spec.ranks > 1:
        return measure_ranks(spec, on_window, classify=classify_exception, inject=inject)
    if spec.paired:
        from autotune.trials.paired import measure_paired_spec

        return measure_paired_spec(spec, on_window)
    return measure_rank(spec, spec.device, on_window, hold=hold)


def _fault_injection(spec: TrialSpec) -> Callable[[str | None], None] | None:
    """The test-suite's fault injection (:mod:`autotune.trials._faults`), for a spec that asks for a fault
    (``TrialSpec.inject``); None for every other trial."""
    if not spec.inject:
        return None
    from autotune.trials import _faults

    return _faults.inject


# ------------------------------------------------------------------------------------- process entry
def set_parent_death_signal() -> None:
    """Linux: the child gets SIGKILL when the tuner dies, so no trial outlives it."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux or no libc: the child lives on without it
        pass


def classify_exception(e: BaseException) -> tuple[Outcome, str | None]:
    """Map an exception raised in the child to an outcome (and the bad file for ``bad-data``)."""
    from autotune.dataset.imaging import BadImageError
    from autotune.trials.rank_group import RankFailed

    if isinstance(e, RankFailed):  # classified in the rank's process
        return e.outcome, e.bad_file
    text = f"{type(e).__name__}: {e}"
    name = type(e).__name__
    if isinstance(e, BadImageError) or name == "BadImageError":
        return Outcome.BAD_DATA, bad_image_path(str(e))
    gpu_alloc = ("CUDA out of memory", "cudaErrorMemoryAllocation", "CUDA allocation failed", "CUDA_ERROR_OUT_OF_MEMORY")
    # DALI 2.x: "Can't allocate 38535168 bytes on device 0" (its GPU operators and nvJPEG's allocator)
    dali_alloc = re.search(r"Can't allocate \d+ bytes on device", text) is not None
    if name == "OutOfMemoryError" or dali_alloc or any(s in text for s in gpu_alloc) or "out of memory" in text.lower() and "cuda" in text.lower():
        return Outcome.OOM_GPU, None
    if isinstance(e, MemoryError) or "std::bad_alloc" in text:
        return Outcome.OOM_HOST, None
    if "Bus error" in text or "shared memory" in text.lower() or "No space left on device" in text and "shm" in text:
        return Outcome.SHM, None
    from autotune.loaders.backends._base import decode_error_file

    bad = decode_error_file(text)
    if bad is not None:
        return Outcome.BAD_DATA, bad
    return Outcome.CRASH, None


def bad_image_path(text: str) -> str | None:
    """The file a ``BadImageError`` names (``"<path>: cannot decode ..."``), also when a DataLoader worker
    re-raised it with its traceback wrapped around the message."""
    import re

    for line in reversed(text.splitlines()):
        line = re.sub(r"^\s*(?:[\w.]*BadImageError: )?", "", line)
        # the longest prefix before a ': ' that is a file (a path may hold ': ' itself)
        found = [line[:m.start()] for m in re.finditer(": ", line) if os.path.isfile(line[:m.start()])]
        if found:
            return found[-1]
    from autotune.loaders.backends._base import decode_error_file

    return decode_error_file(text)


def use_tmpdir(path: str | None) -> None:
    """Make ``path`` this process's temporary folder, and its DataLoader workers' (they inherit it).

    multiprocessing makes a ``pymp-*`` folder per process that shares tensors, and removes it at a clean exit
    only; a worker killed with the trial leaves it behind. Under the trial's own folder, the runner removes it.
    """
    if not path:
        return
    import multiprocessing.process
    import tempfile

    os.environ["TMPDIR"] = path
    tempfile.tempdir = path
    multiprocessing.process.current_process()._config.pop("tempdir", None)  # type: ignore[attr-defined]  # a folder inherited from the zygote


def child_main(fd: int, parent: int | None = None) -> None:
    """Entry point of ``python -m autotune.trials FD``: receive the spec on FD, send windows and the result; a spec that
    says ``keep`` leaves the process waiting for the next one (a warm process, :mod:`autotune.trials.warm`)."""
    from multiprocessing.connection import Connection

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the tuner decides when a trial stops
    set_parent_death_signal()
    if parent is not None and os.getppid() != parent:  # the tuner died before the signal was armed
        os._exit(1)
    # DataLoader workers (forked from here) die with this process too, even when they hang
    os.register_at_fork(after_in_child=set_parent_death_signal)
    conn = Connection(fd)
    try:
        spec: TrialSpec | None = conn.recv()
        first = True
        while spec is not None:
            if not first:
                _next_log(spec)
            use_tmpdir(spec.tmpdir)
            if spec.log:  # stdout and stderr are the trial's log file: say what runs, and keep the details there
                logs.log_to_stderr()
                logger.info("trial process %d: %s on %s, %d rank(s)%s", os.getpid(), spec.loader.describe(), spec.device, spec.ranks,
                            "" if first else ", measured in the process of an earlier trial")
            complete = _serve(conn, spec)
            first = False
            spec = _next_spec(conn) if spec.keep and complete else None  # _serve turns keep off when memory stayed
    finally:
        logs.flush_output()
        conn.close()


def _next_log(spec: TrialSpec) -> None:
    """A warm process's next trial writes to that trial's own log file (to nowhere when it has none or it cannot be
    written, as a fresh process's output would: never to the last trial's)."""
    fd = logs.open_log(spec.log) if spec.log else None
    logs.redirect_output(fd if fd is not None else logs.null_output())  # and closes it


def _next_spec(conn: Any) -> TrialSpec | None:
    """The next trial's spec, once this one's memory is given back; None when the tuner closes the connection. A
    ``stop`` that arrived after the last window (the tuner's, racing the result) is passed over."""
    from autotune.trials.spec import TrialSpec

    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return None
        if isinstance(msg, TrialSpec):
            return msg


def release_memory() -> None:
    """Give back what the last trial's loader left: its objects, DALI's unused pools, torch's cached GPU blocks."""
    import gc
    import sys

    gc.collect()
    dali_backend = sys.modules.get("nvidia.dali.backend")
    if dali_backend is not None and hasattr(dali_backend, "ReleaseUnusedMemory"):
        try:
            dali_backend.ReleaseUnusedMemory()
        except Exception:  # noqa: BLE001 - an older DALI, or none of its memory in use: nothing to give back
            pass
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def process_set_up(spec: TrialSpec) -> tuple[float, float]:
    """Import what the trial's kind of loader needs, start its device and ready it for that kind (``ready_device``): the
    seconds it took (near 0 once done), and of them, the readying that a build pays where it is not done."""
    from autotune.loaders.backends import get_backend
    from autotune.trials.one_rank import start_device

    t0 = time.perf_counter()
    backend = get_backend(spec.loader.backend.value)
    backend.preload()
    start_device(spec.device)
    ready_s = backend.ready_device(spec.device)
    return time.perf_counter() - t0, ready_s


class Dropped(Exception):
    """A trial built ahead was not measured: the tuner dropped it (the search ended first, or the config turned out not
    worth measuring). ``keep``: the tuner asked the process to stay for the next trial of its kind (``"drop"``), rather
    than closing the connection."""

    def __init__(self, message: str, keep: bool = False) -> None:
        super().__init__(message)
        self.keep = keep


def _hold(conn: Any, begun: float, ahead: dict[str, float]) -> Callable[[], None]:
    """What a spec with ``hold`` does once its loader is built: wait for ``"go"``, noting the seconds from the trial's
    start to then (its set-up and build, which the trial before it overlapped) in ``ahead``."""

    def hold() -> None:
        ahead["built_ahead_s"] = round(time.perf_counter() - begun, 3)
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            msg = None
        if msg != "go":
            raise Dropped("dropped before it was measured", keep=msg == "drop")

    return hold


def _serve(conn: Any, spec: TrialSpec) -> bool:
    """Measure ``spec`` and send its result (or how it failed); whether the process may serve the next trial: it
    completed, or it was built ahead and dropped with ``"drop"`` (then it sends ``("dropped", payload)``)."""
    begun = time.perf_counter()
    ahead: dict[str, float] = {}
    set_up_s: float | None = None
    try:

        def on_window(step: int, value: float, spread: tuple[float, float]) -> bool:
            conn.send(("window", step, value, spread))
            if conn.poll():
                return conn.recv() == "stop"
            return False

        set_up_s, ready_s = process_set_up(spec) if spec.keep else (None, 0.0)
        payload = execute(spec, on_window, _hold(conn, begun, ahead) if spec.hold else None)
        payload.update(ahead)
        if set_up_s is not None:  # what a warm process pays once: its later trials find it done (autotune.trials.warm)
            payload["process_setup_s"] = round(set_up_s, 3)
        if ready_s > 0:  # of it, what a build pays in a process that is not readied (a re-measurement's, measured once)
            payload["ready_s"] = round(ready_s, 3)
        logger.info("complete: %.1f samples/s", payload.get("samples_per_s") or 0.0)
        if spec.keep:  # before the result: the next trial's memory readings start from what this one gave back
            try:
                t0 = time.perf_counter()
                release_memory()
                payload["release_s"] = round(time.perf_counter() - t0, 3)
            except Exception:  # noqa: BLE001 - memory not given back is this process's last trial
                logger.exception("giving back the loader's memory failed: this process measures no more trials")
                spec.keep = False
        conn.send(("result", Outcome.COMPLETE.value, payload))
        return True
    except Dropped as e:
        if not (e.keep and spec.keep):
            logger.info("trial dropped before it was measured")
            return False
        # its loader closed: the process gives back the memory and waits for the next trial of its kind, its set-up kept
        logger.info("trial dropped before it was measured; the process waits for the next trial of its kind")
        try:
            release_memory()
        except Exception:  # noqa: BLE001 - memory not given back: this process measures no more trials
            logger.exception("giving back the loader's memory failed: this process measures no more trials")
            return False
        conn.send(("dropped", {"process_setup_s": round(set_up_s or 0.0, 3)}))
        return True
    except BaseException as e:  # noqa: BLE001 - everything is reported to the parent
        from autotune.trials.rank_group import RankFailed

        signal_built(spec.signal)  # failed before its build too (its set-up): the trial beside it waits no longer

        outcome, bad = classify_exception(e)
        msg = [" ".join(str(e).split())] if isinstance(e, RankFailed) else [crash_line(e)]
        logger.log(logging.ERROR if spec.log else logging.DEBUG, "trial failed (%s): %s", outcome.value, traceback.format_exc())
        from autotune.loaders.backends import BACKENDS

        kind = BACKENDS.get(getattr(spec.loader.backend, "value", ""))
        if outcome is Outcome.CRASH and "decod" in str(e).lower() and kind is not None and kind.decode_errors_unnamed:
            bad = find_bad_file(spec.dataset)  # the decoder (DALI's) did not say which file: look for it
            if bad is not None:
                outcome = Outcome.BAD_DATA
        if outcome is Outcome.BAD_DATA:
            lines = f"{type(e).__name__}: {e}".splitlines()
            msg = [f"cannot decode {bad}", *[ln.strip() for ln in lines if "BadImageError: " in ln or "Failed to decode" in ln][-1:]]
        try:
            conn.send(("result", outcome.value, {"message": " ".join(msg)[:2000], "bad_file": bad}))
        except Exception:  # noqa: BLE001 - the tuner has gone: nobody is left to tell
            pass
        return False


_WORKER_CAUGHT = re.compile(r"^Caught (\w+) in DataLoader worker process (\d+)\.")
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+)')


def crash_line(e: BaseException) -> str:
    """One line for an exception that ended a trial, naming where it was raised outside autotune and the libraries
    (the user's ``__getitem__``, transform or collate_fn): ``IndexError: corrupt sample 7 at ds.py:14``. A DataLoader
    worker's exception (its message the worker's whole traceback as text) reads the same."""
    text = str(e).strip()
    caught = _WORKER_CAUGHT.match(text)
    if caught:  # the original traceback, as text: its frames and its last line
        lines = text.splitlines()
        frames = [(m[1], int(m[2])) for m in map(_FRAME.match, lines) if m]
        indented = [i for i, ln in enumerate(lines) if ln.startswith((" ", "\t"))]
        said = " ".join(" ".join(lines[indented[-1] + 1:] if indented else lines[-1:]).split())  # the exception's own lines, its notes too
        head, where = said or caught[1], _outside_libraries(frames)  # the worker apart: the same error in every worker reads alike
    else:
        head = " ".join(f"{type(e).__name__}: {text}".split())
        where = _outside_libraries([(f.filename, f.lineno or 0) for f in traceback.extract_tb(e.__traceback__)])
    return f"{head} at {where}" if where else head


def _outside_libraries(frames: list[tuple[str, int]]) -> str | None:
    """``file:line`` of the innermost frame in none of autotune, torch, DALI or the standard library: the user's code."""
    import sysconfig

    autotune_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    skip = (autotune_dir + os.sep, *(os.path.abspath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "purelib", "platlib")))
    mine = [(f, n) for f, n in frames if not os.path.abspath(f).startswith(skip) and "<frozen" not in f]
    return f"{mine[-1][0]}:{mine[-1][1]}" if mine else None
