"""The user's own pipeline failing in ways the knobs cannot fix: each told in one line that names the cause and where it
was raised, the search ended early, nothing written (``autotune run --dataset FILE.py:FUNC``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from autotune.cli import main
from autotune.trials.child import crash_line

FAST = ["--window", "0.2", "--windows", "2", "--warmup-batches", "1", "--no-report", "--quiet", "--confirm-top", "0", "--device", "cpu"]

FAULTS = '''\
import sys

import torch
from torch.utils.data import Dataset, IterableDataset

import autotune


class Squares(Dataset):
    def __len__(self):
        return 48

    def __getitem__(self, i):
        return torch.full((3, 8, 8), float(i)), i % 4


class Empty(IterableDataset):
    def __iter__(self):
        return iter(())


def empty():
    return Empty()


def strings():
    return autotune.DatasetSpec(Squares(), collate_fn=lambda batch: "a string")
'''


@pytest.fixture
def faults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "faults.py").write_text(FAULTS)
    return tmp_path


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_a_package_that_fails_as_it_is_imported_is_one_line(faults: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (faults / "pkg").mkdir()
    (faults / "pkg" / "__init__.py").write_text('raise RuntimeError("pkg init boom")\n')
    (faults / "pkg" / "mod.py").write_text("def train_set():\n    pass\n")
    monkeypatch.syspath_prepend(str(faults))
    assert main(["run", "--dataset", "pkg.mod:train_set", "--batch-size", "4", "--n-trials", "1", *FAST]) == 2  # was a traceback, exit 1
    err = _one_line(capsys)
    assert "train_set raised RuntimeError: pkg init boom" in err and f"{faults / 'pkg' / '__init__.py'}:1" in err


def test_a_module_that_exits_is_one_line(faults: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (faults / "leaves.py").write_text("import sys\n\nsys.exit(3)\n")
    assert main(["run", "--dataset", "leaves.py:f", "--batch-size", "4", "--n-trials", "1", *FAST]) == 2  # was exit 3, no word
    assert "f raised SystemExit: 3" in _one_line(capsys)


def test_an_empty_stream_is_one_line_before_any_trial(faults: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--dataset", "faults.py:empty", "--batch-size", "4", "--n-trials", "4", *FAST]) == 2
    assert "empty returned an IterableDataset (Empty) that yields no item" in _one_line(capsys)
    assert not Path("autotune.yaml").exists()


@pytest.mark.slow
def test_batches_without_a_tensor_end_the_search_and_name_the_cause(faults: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A collate_fn returning a string: every batch counted 0 samples, and a config at 0 samples/s was written as the
    winner (exit 0); where the trials crashed, 28 of them took the whole budget and the last line blamed the budgets."""
    assert main(["run", "--dataset", "faults.py:strings", "--batch-size", "4", "--n-trials", "20", *FAST]) == 1
    err = _one_line(capsys)
    assert "no trial completed (crash: 3)" in err and "failed alike, so the cause is no loader knob" in err, err
    assert "a batch holds no tensor to count its samples by (a str)" in err and "budgets" not in err
    assert not Path("autotune.yaml").exists()


class _Raises(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> torch.Tensor:
        raise IndexError(f"corrupt sample {i}")


@pytest.mark.parametrize("workers", [0, 1])
def test_a_crash_in_the_users_dataset_is_one_line_naming_its_file_and_line(workers: int) -> None:
    """A DataLoader worker's exception carries the worker's whole traceback as its message: the trial's line was a
    fragment of it ('Caught IndexError in DataLoader worker process 0. Original Traceback ...')."""
    loader = torch.utils.data.DataLoader(_Raises(), batch_size=2, num_workers=workers)
    with pytest.raises(IndexError) as caught:
        next(iter(loader))
    line = crash_line(caught.value)
    assert line.startswith("IndexError: corrupt sample") and f" at {__file__}:" in line, line
    assert "\n" not in line and "Traceback" not in line and "DataLoader worker" not in line


def test_a_file_named_as_a_module_already_imported_is_one_line(faults: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A pipeline in random.py replaced the standard library's random in the process: "module 'random' has no attribute
    'Random'" followed, from anywhere."""
    import random

    (faults / "random.py").write_text("def train_set():\n    pass\n")
    assert main(["run", "--dataset", "random.py:train_set", "--batch-size", "4", "--n-trials", "1", *FAST]) == 2
    assert "random.py has the name of the module 'random' already imported here" in _one_line(capsys)
    assert __import__("sys").modules["random"] is random and hasattr(random, "Random")


def test_a_file_named_as_an_installed_module_not_yet_imported_is_one_line(faults: Path, monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A pipeline in torch.py, run where torch was not imported yet, was imported as torch itself: "No module named
    'torch.utils'; 'torch' is not a package"."""
    import sys

    (faults / "colorsys.py").write_text("def train_set():\n    pass\n")  # of the standard library, and imported by nothing here
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    assert main(["run", "--dataset", "colorsys.py:train_set", "--batch-size", "4", "--n-trials", "1", *FAST]) == 2
    assert "colorsys.py has the name of the module 'colorsys' installed here, which it would hide; rename your file" in _one_line(capsys)


def test_a_folder_named_as_a_file_is_said_to_be_one(faults: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (faults / "dir.py").mkdir()
    assert main(["run", "--dataset", "dir.py:f", "--batch-size", "4", "--n-trials", "1", *FAST]) == 2
    assert "dir.py is a folder, not a Python file" in _one_line(capsys)  # was "does not exist"


def test_a_batch_larger_than_the_dataset_counts_samples_not_images(faults: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (faults / "few.py").write_text(FAULTS + "\n\ndef squares():\n    return Squares()\n")
    assert main(["run", "--dataset", "few.py:squares", "--batch-size", "100", "--n-trials", "1", *FAST]) == 2
    assert "is larger than the 48 samples per rank; pass a smaller --batch-size or use more samples" in _one_line(capsys)


class _TwoLines(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> torch.Tensor:
        raise ValueError("bad sample\nsecond line of detail")


@pytest.mark.parametrize("workers", [0, 1])
def test_a_crash_reads_the_same_in_the_loop_and_in_a_worker(workers: int) -> None:
    """Read in a worker, only the message's last line was kept ('second line of detail at ...'): the same error then
    read two ways, and trials failing alike were not seen as alike."""
    with pytest.raises(ValueError) as caught:
        next(iter(torch.utils.data.DataLoader(_TwoLines(), batch_size=2, num_workers=workers)))
    assert crash_line(caught.value).startswith(f"ValueError: bad sample second line of detail at {__file__}:")


@pytest.mark.parametrize("field", ["collate_fn", "worker_init_fn"])
def test_a_spec_function_that_is_no_function_is_one_line_before_any_trial(faults: Path, capsys: pytest.CaptureFixture[str], field: str) -> None:
    """collate_fn=5 ended every trial in "TypeError: 'int' object is not callable", naming neither the field nor the fix."""
    (faults / "spec.py").write_text(FAULTS + f"\n\ndef five():\n    return autotune.DatasetSpec(Squares(), {field}=5)\n")
    assert main(["run", "--dataset", "spec.py:five", "--batch-size", "4", "--n-trials", "1", *FAST]) == 2
    assert _one_line(capsys).endswith(f"five: {field} must be a function or None, but got int 5; pass the function")


@pytest.mark.parametrize("returned, said", [
    ("Sized(10.5)", "bad returned a Sized whose __len__ returned 10.5; it must return its number of samples, a whole number"),
    ("Sized(-3)", "bad returned a Sized whose __len__ returned -3; it must return its number of samples, a whole number"),
    ("Sized", "bad returned the class Sized, not a Dataset; return an instance of it (Sized(...))"),
])
def test_a_length_python_refuses_is_told_as_the_datasets_not_the_functions(faults: Path, capsys: pytest.CaptureFixture[str], returned: str,
                                                                          said: str) -> None:
    """len() refusing what __len__ returned (or a class's unbound one) was told as 'bad raised TypeError: ...'."""
    sized = "class Sized(Dataset):\n    def __init__(self, n):\n        self.n = n\n\n    def __len__(self):\n        return self.n\n\n" \
            "    def __getitem__(self, i):\n        return torch.zeros(2)\n"
    (faults / "lens.py").write_text(f"{FAULTS}\n\n{sized}\n\ndef bad():\n    return {returned}\n")
    assert main(["run", "--dataset", "lens.py:bad", "--batch-size", "4", "--n-trials", "1", *FAST]) == 2
    assert _one_line(capsys).endswith(said)


def test_a_function_that_hangs_is_stopped_where_the_budget_ends() -> None:
    """A pipeline function that never returned kept a --budget 15 run waiting until it was killed."""
    import signal
    import time

    from autotune.dataset.user import deadline
    from autotune.errors import UserError

    before = signal.getsignal(signal.SIGALRM)
    t0 = time.monotonic()
    with pytest.raises(UserError) as caught, deadline("/p/pipe.py:sleeper", 0.3, 15.0):
        time.sleep(30)  # the user's code, stuck
    assert time.monotonic() - t0 < 5
    line = next(n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "time.sleep(30)" in text)
    assert str(caught.value) == (f"sleeper had not returned when the 15 s --budget ran out (it was at {__file__}:{line}); "
                                 "a dataset that takes longer to make needs a longer --budget")
    assert signal.getsignal(signal.SIGALRM) is before and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    with deadline("/p/pipe.py:quick", 5.0, 15.0):
        pass
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # nothing left to fire after a function that returned


def test_a_hang_inside_a_library_is_told_at_the_users_line_and_an_earlier_alarm_goes_on(tmp_path: Path) -> None:
    """The line named was the library's (threading.py, where queue.get waits), not the line of the user's file; and
    leaving the deadline cancelled an alarm its caller had set."""
    import importlib.util
    import signal

    from autotune.dataset.user import deadline
    from autotune.errors import UserError

    path = tmp_path / "pipe.py"
    path.write_text("import queue\n\n\ndef stuck():\n    return queue.Queue().get()\n")
    spec = importlib.util.spec_from_file_location("pipe_for_deadline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(UserError) as caught, deadline(f"{path}:stuck", 0.2, 5.0):
        module.stuck()
    assert f"(it was at {path}:5)" in str(caught.value)
    signal.signal(signal.SIGALRM, lambda *_: None)
    signal.setitimer(signal.ITIMER_REAL, 30.0)  # the caller's own alarm, e.g. a test timeout
    try:
        with deadline(f"{path}:stuck", 5.0, 60.0):
            pass
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        assert 25.0 < left <= 30.0, left
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


def test_a_pipeline_file_installed_as_itself_is_not_told_it_hides_an_installed_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A single-file module installed in place (``pip install -e``) is the installed module: no other file is hidden."""
    import sys

    from autotune.dataset import user

    path = tmp_path / "pipe_installed_here.py"
    path.write_text("def make():\n    return list(range(4))\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # where the installed module is found
    monkeypatch.setattr(user, "_installed", lambda name: name == "pipe_installed_here")
    monkeypatch.delitem(sys.modules, "pipe_installed_here", raising=False)
    try:
        assert user.load_module(f"{path}:make").make() == [0, 1, 2, 3]
    finally:
        sys.modules.pop("pipe_installed_here", None)
