"""The Python side given a Dataset that cannot be measured: autotune's one-line errors, not torch's or Python's."""

from __future__ import annotations

import pytest
import torch

import autotune
from autotune.config.schema import LoaderConfig
from autotune.errors import UserError


class Sized(torch.utils.data.Dataset):
    def __init__(self, n: object) -> None:
        self.n = n

    def __len__(self):  # noqa: ANN204 - whatever the user's returns
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.zeros(2)


@pytest.mark.parametrize("n", [-3, 4.5])
def test_a_len_that_python_refuses_is_named(n: object) -> None:
    with pytest.raises(UserError, match=r"len\(\) of the Sized given failed .*its __len__ must return its number of samples"):
        autotune.AutoLoader(Sized(n), batch_size=2, device="cpu", config=None, storage=None)
    cfg = LoaderConfig.from_params({"backend": "user", "batch_size": 2, "num_workers": 0})
    with pytest.raises(UserError, match="its __len__ must return its number of samples"):
        autotune.build_loader(Sized(n), cfg)


def test_build_loader_over_an_empty_dataset_is_named() -> None:
    cfg = LoaderConfig.from_params({"backend": "user", "batch_size": 2, "num_workers": 0})
    with pytest.raises(UserError, match=r"the Sized given is empty \(len 0\)"):  # was torch's "num_samples should be a positive integer"
        autotune.build_loader(Sized(0), cfg)


def test_tune_without_a_batch_size_names_the_dataset_not_a_module_made_for_it() -> None:
    with pytest.raises(UserError) as caught:
        autotune.tune(Sized(8))
    assert str(caught.value) == "the Sized given is your own Dataset: pass its batch_size (the one training uses)"


class Unsplit(torch.utils.data.IterableDataset):
    """A stream that every worker yields whole: the bug tune() and AutoLoader catch."""

    def __iter__(self):  # noqa: ANN204 - a generator, as users write it
        yield from (torch.tensor([float(i)]) for i in range(16))


def test_build_loader_refuses_a_stream_its_workers_would_each_deliver_whole() -> None:
    """With 2 workers it delivered 32 items from a stream of 16, silently."""
    cfg = LoaderConfig.from_params({"backend": "user", "batch_size": 4, "num_workers": 2})
    with pytest.raises(UserError, match=r"the IterableDataset given \(Unsplit\) has workers that all yield the same items .*get_worker_info"):
        autotune.build_loader(Unsplit(), cfg)
    one = LoaderConfig.from_params({"backend": "user", "batch_size": 4, "num_workers": 1})  # one worker delivers the stream once
    assert sum(len(b) for b in autotune.build_loader(Unsplit(), one)) == 16
