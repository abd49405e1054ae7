"""When ``autotune run`` starts the process its trials are forked from, and when that process imports torchvision."""

from __future__ import annotations

import pytest

from autotune.cli import main


class _Checked(Exception):
    """Raised where the test has seen what it needs: the run goes no further."""


class _Zygote:
    """Stands in for the measuring process: records when torchvision is asked for."""

    def __init__(self, seen: list) -> None:
        self.seen = seen

    def later_after(self, forks: int | None) -> None:
        self.seen.append(("later after", forks))

    def close(self) -> None:
        pass


@pytest.fixture()
def order(monkeypatch):
    from autotune.dataset import user
    from autotune.tuning import prepare

    seen: list = []
    real_collect, real_open = prepare.fingerprint.collect, user.open_target

    def collect() -> dict:
        seen.append("fingerprint")
        return real_collect()

    def open_target(target: str):  # noqa: ANN202 - open_target's own result
        seen.append("user's module imported here")
        return real_open(target)

    def launch(early: object, preload: str | None = None) -> tuple[_Zygote, str]:  # noqa: ARG001 - launch_zygote's signature
        seen.append(("measuring process", preload))
        return _Zygote(seen), ""

    def fit(*a, **k):  # noqa: ANN002, ANN003, ARG001 - fit_batch_sizes' signature
        raise _Checked

    monkeypatch.setattr(prepare.fingerprint, "collect", collect)
    monkeypatch.setattr(user, "open_target", open_target)
    monkeypatch.setattr(prepare, "launch_zygote", launch)
    monkeypatch.setattr(prepare, "fit_batch_sizes", fit)
    return seen


def _launches(seen: list) -> list:
    return [x for x in seen if isinstance(x, tuple) and x[0] == "measuring process"]


def test_the_measuring_process_starts_before_the_machine_and_the_dataset_are_read(tiny_dataset, workdir, order):
    """Started after the fingerprint and the dataset (a user's module imported and called), the process the trials fork
    from kept the first trial of a default 60 s run on an H100 waiting 5.2 s for its imports."""
    with pytest.raises(_Checked):
        main(["run", "--dataset", str(tiny_dataset), "--n-trials", "1", "--device", "cpu"])
    assert order[:2] == [("measuring process", None), "fingerprint"] and len(_launches(order)) == 1, order
    # a user's module: imported there once every flag is checked, as it is imported here, not after
    (workdir / "pipe.py").write_text("import torch\n\n\ndef make():\n    return torch.utils.data.TensorDataset(torch.zeros(8, 2), torch.arange(8))\n")
    order.clear()
    with pytest.raises(_Checked):
        main(["run", "--dataset", "pipe.py:make", "--n-trials", "1", "--device", "cpu", "--batch-size", "4"])
    assert _launches(order) == [("measuring process", f"{workdir / 'pipe.py'}:make")], order
    assert order.index(_launches(order)[0]) == order.index("user's module imported here") - 1 and order[0] == "fingerprint", order
    order.clear()  # a missing --batch-size starts nothing
    assert main(["run", "--dataset", "pipe.py:make", "--n-trials", "1", "--device", "cpu", "--space", "nope"]) == 2
    assert main(["run", "--dataset", "pipe.py:make", "--n-trials", "1", "--device", "cpu"]) == 2
    assert not _launches(order), order
    order.clear()  # --reuse: none before a stored study is looked for
    with pytest.raises(_Checked):
        main(["run", "--dataset", str(tiny_dataset), "--n-trials", "1", "--device", "cpu", "--reuse"])
    assert not _launches(order), order
    order.clear()  # --if-stale: once the config is found stale
    with pytest.raises(_Checked):
        main(["run", "--dataset", str(tiny_dataset), "--n-trials", "1", "--device", "cpu", "--if-stale", "none.yaml"])
    assert order[0] == "fingerprint" and _launches(order) == [("measuring process", None)], order


@pytest.mark.parametrize(("flags", "want"), [
    ([], 0),  # no build ahead (a CPU device): at once
    (["--build-ahead", "on"], 2),  # DALI's two starts first, one built beside the other; the torch starts later
    (["--build-ahead", "on", "--space", "torch"], 0),
    (["--build-ahead", "on", "--space", "dali"], None),  # no kind needs it: only a trial that does asks
])
def test_torchvision_is_asked_for_once_the_kinds_are_known(tiny_dataset, workdir, order, flags, want):
    with pytest.raises(_Checked):
        main(["run", "--dataset", str(tiny_dataset), "--n-trials", "1", "--device", "cpu", "--batch-size", "8", *flags])
    assert [x for x in order if isinstance(x, tuple) and x[0] == "later after"] == [("later after", want)], order
