"""The user's own dataset: ``--dataset FILE.py:FUNC`` or ``--dataset package.module:FUNC``.

``FUNC()`` returns a ``torch.utils.data.Dataset``, map-style or iterable, or a :class:`DatasetSpec` (the dataset with
its ``collate_fn`` and ``worker_init_fn``); or ``FUNC`` is, or returns, a DALI pipeline function (``@pipeline_def``),
which the kind ``dali_user`` builds. An ``IterableDataset`` must split its stream among the DataLoader's workers
(:func:`check_split` compares the first items of two workers before anything is measured).
The module is imported once per process (the trials' zygote imports it
before it forks them); its identity in the YAML is ``module:qualname`` and the sha256 of its source file, so a
changed pipeline makes the config stale. An exception in the user's code is one line naming ``FUNC`` and the
innermost ``file:line`` of the user's file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import importlib.util
import logging
import operator
import os
import re
import reprlib
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from autotune.dataset.scan import Dataset
from autotune.errors import DatasetError, UserError

logger = logging.getLogger(__name__)

#: the items of each worker that :func:`check_split` compares
SPLIT_ITEMS = 3

#: ``FILE.py:FUNC`` or ``package.module:FUNC`` (FUNC may be a dotted qualname, ``Class.method``)
_TARGET = re.compile(r"^(?P<module>.+?):(?P<func>[A-Za-z_][\w.]*)$")
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """What a pipeline function may return instead of a bare Dataset: the dataset and the DataLoader's own
    ``collate_fn`` and ``worker_init_fn`` for it (None: the DataLoader's defaults)."""

    dataset: Any
    collate_fn: Callable[..., Any] | None = None
    worker_init_fn: Callable[..., Any] | None = None


class UserCodeError(UserError):
    """An exception raised in the user's pipeline code, told in one line (the traceback goes to the log)."""


def is_target(text: str | os.PathLike[str] | None) -> bool:
    """Whether ``text`` names a pipeline function (``FILE.py:FUNC``, ``package.module:FUNC``) rather than a folder."""
    if text is None or not isinstance(text, str) or os.path.isdir(text):
        return False
    m = _TARGET.match(text)
    return m is not None and (m["module"].endswith(".py") or _DOTTED.match(m["module"]) is not None)


def split(target: str) -> tuple[str, str]:
    """``(module or file, function)`` of a target."""
    m = _TARGET.match(target)
    if m is None:
        raise DatasetError(f"--dataset {target!r} is neither a folder nor FILE.py:FUNC nor package.module:FUNC")
    return m["module"], m["func"]


def source_file(target: str) -> str:
    """The source file a target's function lives in (a module is found without running it where it can be)."""
    module, _ = split(target)
    if module.endswith(".py"):
        path = os.path.abspath(module)
        if not os.path.isfile(path):  # check and --if-stale hash it before anything imports it
            raise DatasetError(f"--dataset {target}: {path} {'is a folder, not a Python file' if os.path.isdir(path) else 'does not exist'}; "
                               "pass FILE.py:FUNC with an existing file")
        return path

    def find() -> Any:  # imports the packages above the module: their errors are the user's code's
        try:
            return importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return None

    spec = _user_call(target, find, None)
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        raise DatasetError(f"--dataset {target}: no module {module!r} is importable here; check the name and PYTHONPATH")
    return spec.origin


def sha256_of(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


#: the module names this process imported pipeline files as (one of them is replaced by another file of the same name)
_FILES_LOADED: set[str] = set()


def _installed(name: str) -> bool:
    """Whether ``name`` is a module of the standard library or of an installed distribution (a top-level name)."""
    import importlib.metadata

    return name in sys.stdlib_module_names or name in importlib.metadata.packages_distributions()


def _is_installed_file(name: str, path: str) -> bool:
    """Whether the installed module ``name`` is the file at ``path`` itself (a single-file module installed in place)."""
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    origin = getattr(found, "origin", None)
    return bool(origin) and os.path.realpath(str(origin)) == os.path.realpath(path)


def load_module(target: str) -> Any:
    """Import the module of ``target`` once per process: a file by its stem, with its folder on ``sys.path`` (so that
    spawned workers import it by the same name when they unpickle the dataset)."""
    module, _ = split(target)
    if not module.endswith(".py"):
        return _user_call(target, lambda: importlib.import_module(module), None)
    path = os.path.abspath(module)
    if not os.path.isfile(path):
        raise DatasetError(f"--dataset {target}: {module} is not a file; pass FILE.py:FUNC with an existing file")
    name = Path(path).stem
    loaded = sys.modules.get(name)
    if loaded is not None and os.path.realpath(getattr(loaded, "__file__", "") or "") == os.path.realpath(path):  # by a link too
        return loaded
    if loaded is not None and name not in _FILES_LOADED:  # it would replace a module not a pipeline file (random.py: the standard library's)
        raise DatasetError(f"--dataset {target}: {module} has the name of the module {name!r} already imported here "
                           f"({getattr(loaded, '__file__', None) or 'built in'}); rename your file")
    if loaded is None and _installed(name) and not _is_installed_file(name, path):  # torch.py: torch not imported yet here, but
        # every trial's import of it would find the file
        raise DatasetError(f"--dataset {target}: {module} has the name of the module {name!r} installed here, which it would hide; "
                           "rename your file")
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise DatasetError(f"--dataset {target}: {module} cannot be imported as a Python module")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    _FILES_LOADED.add(name)
    loader = spec.loader

    def run() -> Any:
        loader.exec_module(mod)
        return mod

    try:
        return _user_call(target, run, path)
    except BaseException:
        sys.modules.pop(name, None)
        raise


def function(target: str) -> Callable[[], Any]:
    """The pipeline function ``target`` names, its module imported (once per process)."""
    mod = load_module(target)
    _, func = split(target)
    obj: Any = mod
    for part in func.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise DatasetError(f"--dataset {target}: {mod.__name__} has no {func!r}")
    if not callable(obj):
        raise DatasetError(f"--dataset {target}: {func} is a {type(obj).__name__}, not a function that returns a Dataset")
    return obj


def dataset_spec(target: str) -> DatasetSpec:
    """Call the pipeline function of ``target``: its dataset, as a :class:`DatasetSpec` (a Dataset object given to this
    process, :func:`in_process`, is its own)."""
    if target in _OBJECTS:
        return _OBJECTS[target][0]
    fn = function(target)
    return as_spec(_user_call(target, fn, _file_of(fn)), split(target)[1])


def is_pipeline_def(value: Any) -> bool:
    """Whether ``value`` is a DALI pipeline function, one decorated with ``@nvidia.dali.pipeline_def`` (read without
    importing DALI)."""
    return callable(value) and bool(getattr(value, "_is_pipeline_def", False))


def pipeline_function(target: str) -> Callable[..., Any]:
    """The DALI pipeline function of ``target``: ``FUNC`` itself when it is one, else what ``FUNC()`` returns."""
    fn = function(target)
    value = fn if is_pipeline_def(fn) else _user_call(target, fn, _file_of(fn))
    if not is_pipeline_def(value):
        raise DatasetError(f"{split(target)[1]} returned a {type(value).__name__}, not a DALI pipeline function (one decorated with "
                           "@nvidia.dali.pipeline_def)")
    return value


def takes_hw_decoder_load(pipeline_fn: Any) -> bool:
    """Whether a pipeline function takes ``hw_decoder_load`` (its own parameter: DALI's Pipeline has none)."""
    import inspect

    try:
        return "hw_decoder_load" in inspect.signature(pipeline_fn).parameters
    except (TypeError, ValueError):  # no signature to read
        return False


def as_spec(value: Any, name: str = "the dataset") -> DatasetSpec:
    """A Dataset or a DatasetSpec as a :class:`DatasetSpec`; anything else is one line."""
    spec = value if isinstance(value, DatasetSpec) else DatasetSpec(value)
    for field in ("collate_fn", "worker_init_fn"):  # else a TypeError with neither name, in every trial or after training began
        fn = getattr(spec, field)
        if fn is not None and not callable(fn):
            raise DatasetError(f"{name}: {field} must be a function or None, but got {type(fn).__name__} {reprlib.repr(fn)}; pass the function")
    ds = spec.dataset
    if isinstance(ds, type):  # its __len__ and __getitem__ are there, unbound: len() of it failed, blamed on the function
        raise DatasetError(f"{name} returned the class {ds.__name__}, not a Dataset; return an instance of it ({ds.__name__}(...))")
    if is_iterable(ds):
        return spec
    if not (hasattr(ds, "__getitem__") and hasattr(ds, "__len__")):
        raise DatasetError(f"{name} returned a {type(ds).__name__}, not a torch Dataset (map-style: __getitem__ and __len__; or an "
                           "IterableDataset) or an autotune.DatasetSpec")
    return spec


def is_iterable(dataset: Any) -> bool:
    """Whether ``dataset`` is a ``torch.utils.data.IterableDataset`` (a stream: no sampler, no shuffle, no length needed)."""
    from torch.utils.data import IterableDataset

    return isinstance(dataset, IterableDataset)


def _first_items(dataset: Any, worker: int, workers: int) -> list[Any]:
    """The first :data:`SPLIT_ITEMS` items ``dataset`` yields in worker ``worker`` of ``workers`` (``get_worker_info``
    answers as it does in a DataLoader's worker, in this process)."""
    import itertools

    from torch.utils.data._utils import worker as _worker

    saved = _worker._worker_info
    _worker._worker_info = _worker.WorkerInfo(id=worker, num_workers=workers, seed=worker, dataset=dataset)
    try:
        return list(itertools.islice(iter(dataset), SPLIT_ITEMS))
    finally:
        _worker._worker_info = saved


def same(a: Any, b: Any) -> bool:
    """Whether two items are equal: tensors and arrays by value, containers item by item.

    Raises:
        TypeError: the items cannot be compared (no equality that answers True or False).
    """
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if hasattr(a, "shape") and hasattr(a, "dtype"):  # a numpy array, without importing numpy
        import numpy as np

        return bool(np.array_equal(a, b))
    answer = a == b
    if not isinstance(answer, bool):
        raise TypeError(f"{type(a).__name__} == {type(b).__name__} gave a {type(answer).__name__}, not True or False")
    return answer


def check_split(spec: DatasetSpec, name: str = "the dataset", *, given: bool = False) -> None:
    """Raise when an IterableDataset does not split its stream by worker: worker 0 and worker 1 of 2 yield the same first
    items, so that N workers would deliver every item N times. A stream whose items cannot be compared, or whose own
    first items are all alike (a constant stream says nothing), is let through with a log line. ``given``: the dataset
    was handed over as an object (``AutoLoader(dataset)``), not returned by the function ``name``."""
    ds = spec.dataset
    if not is_iterable(ds):
        return
    first, second = _first_items(ds, 0, 2), _first_items(ds, 1, 2)
    if not first and not second and not _first_items(ds, 0, 1):  # every trial would crash on an epoch of no batch
        what = f"the IterableDataset given ({type(ds).__name__})" if given else f"{name} returned an IterableDataset ({type(ds).__name__}) that"
        raise DatasetError(f"{what} yields no item (its __iter__ ended at once); return a stream with samples to measure")
    if not first or not second:
        return
    try:
        constant = all(same(first[0], x) for x in first[1:]) if len(first) > 1 else False
        alike = len(first) == len(second) and all(same(x, y) for x, y in zip(first, second, strict=True))
    except Exception as e:  # noqa: BLE001 - items of any kind: one that cannot be compared is not judged
        logger.info("%s: the first items of two workers could not be compared (%s): not checked that it splits its stream by worker", name, e)
        return
    if constant:
        logger.info("%s yields the same item again and again: not checked that it splits its stream by worker", name)
    elif alike:
        cls = type(ds).__name__
        what = f"the IterableDataset given ({cls}) has workers that" if given else f"{name} returned an IterableDataset ({cls}) whose workers"
        raise DatasetError(f"{what} all yield the same items (worker 0 and 1 "
                           "of 2 began alike), so N workers would deliver each item N times; split the stream in __iter__ with "
                           "torch.utils.data.get_worker_info() (worker id and num_workers)")


def picklable(spec: DatasetSpec) -> bool:
    """Whether the dataset (with its collate and worker-init functions) pickles: spawn and forkserver workers need it."""
    import pickle

    try:
        pickle.dumps((spec.dataset, spec.collate_fn, spec.worker_init_fn))
        return True
    except Exception:  # noqa: BLE001 - any failure to pickle means the same: workers must be forked
        return False


def _file_of(fn: Any) -> str | None:
    code = getattr(fn, "__code__", None) or getattr(vars(type(fn)).get("__call__"), "__code__", None)  # a function, or a callable object
    return os.path.abspath(code.co_filename) if code is not None else None


def _user_call(target: str, call: Callable[[], Any], path: str | None) -> Any:
    """``call()``; an exception it raises is one :class:`UserCodeError` line naming FUNC and the innermost frame in
    the user's file (``path``; else the innermost frame outside autotune)."""
    try:
        return call()
    except UserError:
        raise
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[:2] in (["nvidia"], ["nvidia", "dali"]):  # the user's DALI pipeline, without DALI here
            from autotune._imports import try_import

            try_import("dali")  # the one line that names the extra
        raise UserCodeError(told(target, e, path)) from e
    except (Exception, SystemExit) as e:  # sys.exit() in a module imported for it ended the run without a word
        raise UserCodeError(told(target, e, path)) from e


@contextlib.contextmanager
def deadline(target: str, seconds: float | None, budget_s: float | None) -> Iterator[None]:
    """Stop the user's code of ``target`` (its import and its call, in this process) when the ``budget_s`` --budget
    has ``seconds`` left and it has not returned: a function that hangs kept the run waiting past any budget. One line
    says where it was. Only in the main thread, where signals arrive; None: no deadline."""
    if seconds is None or budget_s is None or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    module = split(target)[0]
    path = os.path.abspath(module) if module.endswith(".py") else None

    def late(signum: int, frame: Any) -> None:
        at = users_line([(f.f_code.co_filename, lineno) for f, lineno in reversed(list(traceback.walk_stack(frame)))], path)
        where = f" (it was at {at})" if at else ""
        raise UserError(f"{split(target)[1]} had not returned when the {budget_s:g} s --budget ran out{where}; "
                        "a dataset that takes longer to make needs a longer --budget")

    before = signal.signal(signal.SIGALRM, late)
    # a budget that set-up used up still gives the function a little time: the run goes on with one trial then
    began = time.monotonic()
    earlier, _ = signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.1 * budget_s, 1.0))  # the caller's alarm, if any
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
        if earlier > 0:  # an alarm the caller had set goes on, less the time spent here
            signal.setitimer(signal.ITIMER_REAL, max(0.001, earlier - (time.monotonic() - began)))


def users_line(frames: list[tuple[str, int]], path: str | None) -> str | None:
    """``file:line`` of the innermost of ``frames`` (outermost first) in the user's file ``path`` (a call into a library
    is reached from there), else of the innermost outside autotune; None when every frame is autotune's."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    mine = [f for f in frames if path is not None and os.path.abspath(f[0]) == path] or \
        [f for f in frames if not os.path.abspath(f[0]).startswith(here) and "<frozen" not in f[0]]
    return f"{mine[-1][0]}:{mine[-1][1]}" if mine else None


def told(target: str, e: BaseException, path: str | None = None) -> str:
    """The one line for an exception ``e`` raised by the user's code of ``target``."""
    _, func = split(target)
    at = users_line([(f.filename, f.lineno or 0) for f in traceback.extract_tb(e.__traceback__)], path)
    where = f" at {at}" if at else ""
    if isinstance(e, SyntaxError) and e.filename:
        where = f" at {e.filename}:{e.lineno}"
    text = " ".join(str(e).split()) or "(no message)"
    return f"{func} raised {type(e).__name__}: {text}{where}"


@dataclasses.dataclass(frozen=True)
class UserDataset(Dataset):
    """A user's pipeline function as the study's dataset: plain data, pickled to each trial, which calls it there.

    ``root`` is the target as given (``FILE.py:FUNC``, the file made absolute); the folder kinds' file lists stay empty.
    """

    qualname: str = ""  # module:qualname of the function
    source: str = ""  # its source file
    sha256: str = ""  # of the source file
    samples: int = 0
    pickles: bool = False  # whether the dataset pickles (spawn and forkserver workers need it)
    iterable: bool = False  # an IterableDataset: a stream, read without a sampler; ``samples`` is its len() if it has one, else 0
    dali: bool = False  # a DALI pipeline function (``@pipeline_def``): the kind dali_user builds it (``iterable``, ``samples`` 0)
    hw_decoder_load: bool = False  # that function takes ``hw_decoder_load``

    def __len__(self) -> int:
        return self.samples

    def count_text(self) -> str:
        if self.dali:
            return "a DALI pipeline"
        return "a stream of samples" if self.iterable and not self.samples else f"{self.samples:,} samples"

    @property
    def unit(self) -> str:
        return "samples"

    def signature(self) -> str:
        return self.sha256

    def summary(self) -> dict:
        return {"path": shown_root(self.root), "signature": self.sha256, "function": {"name": self.qualname, "source": self.source,
                                                                          "sha256": self.sha256, "samples": self.samples}}


def shown_root(root: str) -> str:
    """``root`` as the YAML and the study's name show it: a Dataset object given in this process is named by its class
    (``<module:Class object>``), without the address that tells two of them apart here and changes every run."""
    return re.sub(r" at 0x[0-9a-f]+>$", ">", root)


def absolute(target: str) -> str:
    """The target with its file made absolute (a cron job re-tunes from another folder)."""
    module, func = split(target)
    return f"{os.path.abspath(module)}:{func}" if module.endswith(".py") else target


def open_target(target: str) -> tuple[UserDataset, DatasetSpec]:
    """Import and call the pipeline function of ``target`` in this process: the study's dataset and the user's."""
    target = absolute(target)
    source = source_file(target)
    fn = function(target)
    qualname = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', split(target)[1])}"
    value = fn if is_pipeline_def(fn) else _user_call(target, fn, _file_of(fn))
    if is_pipeline_def(value):  # a DALI pipeline function: built in each trial, its length unknown here
        ds = UserDataset(root=target, classes=(), files=(), labels=(), total_bytes=0, qualname=qualname, source=source,
                         sha256=sha256_of(source), iterable=True, dali=True, hw_decoder_load=takes_hw_decoder_load(value))
        return ds, DatasetSpec(value)
    spec = as_spec(value, split(target)[1])
    iterable = is_iterable(spec.dataset)
    if iterable:
        _user_call(target, lambda: check_split(spec, split(target)[1]), source)
    n = _length(target, spec.dataset, source) if not iterable or hasattr(spec.dataset, "__len__") else 0
    if n < 1 and not iterable:
        raise DatasetError(f"{split(target)[1]} returned an empty dataset (len 0); return one with samples to measure")
    ds = UserDataset(root=target, classes=(), files=(), labels=(), total_bytes=0, qualname=qualname, source=source,
                     sha256=sha256_of(source), samples=int(n), pickles=picklable(spec), iterable=iterable)
    return ds, spec


def _length(target: str, dataset: Any, source: str) -> int:
    """The number of samples of the dataset ``target`` returned: its ``__len__`` run as the user's code (an exception in it
    names its line), its answer checked here (len() refused a float or a negative number, and the function was blamed)."""
    raw = _user_call(target, lambda: type(dataset).__len__(dataset), source)
    try:
        n = operator.index(raw)
    except TypeError:
        n = -1
    if n < 0:
        raise DatasetError(f"{split(target)[1]} returned a {type(dataset).__name__} whose __len__ returned {reprlib.repr(raw)}; it must return "
                           "its number of samples, a whole number")
    return n


def summary_of(target: str) -> dict[str, Any]:
    """What ``autotune check`` compares for a target, without running it: its path and its source's hash."""
    target = absolute(target)
    return {"path": target, "signature": sha256_of(source_file(target))}


def present(target: str) -> bool:
    """Whether a target's source file is here (a recorded target is compared only then)."""
    try:
        return os.path.isfile(source_file(target))
    except UserError:
        return False


#: Dataset objects handed to this process (``AutoLoader(dataset)``), by the ``root`` of their :class:`UserDataset`
_OBJECTS: dict[str, tuple[DatasetSpec, UserDataset]] = {}


def in_process(value: Any) -> UserDataset:
    """A Dataset object (or a :class:`DatasetSpec`) given to this process as the study's dataset: its identity is its
    class (``module:qualname``, the sha256 of the class's source file) and its length; :func:`dataset_spec` of its
    ``root`` returns it, here, without a function to call. An IterableDataset is checked with :func:`check_split`."""
    import inspect

    spec = as_spec(value)
    cls = type(spec.dataset)
    qualname = f"{cls.__module__}:{cls.__qualname__}"
    try:
        source = os.path.abspath(inspect.getsourcefile(cls) or "")
    except TypeError:  # a class of a built-in module
        source = ""
    sha = sha256_of(source) if os.path.isfile(source) else hashlib.sha256(qualname.encode()).hexdigest()
    iterable = is_iterable(spec.dataset)
    if iterable:
        check_split(spec, cls.__name__, given=True)
    n = given_length(spec.dataset, at_least_one=not iterable) if not iterable or hasattr(spec.dataset, "__len__") else 0
    root = f"<{qualname} object at {id(spec.dataset):#x}>"
    ds = UserDataset(root=root, classes=(), files=(), labels=(), total_bytes=0, qualname=qualname, source=source, sha256=sha,
                     samples=int(n), pickles=picklable(spec), iterable=iterable)
    _OBJECTS[root] = (spec, ds)
    return ds


def given_length(dataset: Any, *, at_least_one: bool = True) -> int:
    """The length of a Dataset object given in this process, or one line saying why it has none to measure."""
    try:
        n = len(dataset)
    except (TypeError, ValueError) as e:  # len() refuses what __len__ returned: a negative number, a float
        raise DatasetError(f"len() of the {type(dataset).__name__} given failed ({e}); its __len__ must return its number of samples") from None
    if n < 1 and at_least_one:
        raise DatasetError(f"the {type(dataset).__name__} given is empty (len 0); pass a dataset with samples")
    return n


def given(root: Any) -> UserDataset | None:
    """The :class:`UserDataset` of a Dataset object given to this process under ``root``; None for anything else."""
    found = _OBJECTS.get(root) if isinstance(root, str) else None
    return found[1] if found is not None else None


def unguarded_main() -> str | None:
    """The running script, when it has no ``if __name__ == "__main__":`` guard: workers started by spawn or forkserver
    import it again and run its training (an AutoLoader in each of them); None where it has one, or is no file (an
    interactive session, ``python -c``)."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not isinstance(path, str) or not path.endswith(".py") or not os.path.isfile(path):
        return None
    import ast

    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None

    def names_main(test: ast.expr) -> bool:  # __name__ == "__main__", either way round, alone or within an and
        return any(isinstance(n, ast.Compare) and {"__name__", "__main__"} <= {getattr(x, "id", getattr(x, "value", None))
                                                                              for x in (n.left, *n.comparators)} for n in ast.walk(test))

    return None if any(isinstance(node, ast.If) and names_main(node.test) for node in tree.body) else path
