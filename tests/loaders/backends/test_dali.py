"""DALI-specific behaviour: device rules, the missing-package error, file names DALI cannot take, GPU decoding."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from autotune._imports import is_available
from autotune.config.schema import DaliOptions, LoaderConfig
from autotune.dataset.scan import Dataset, scan
from autotune.errors import UserError
from autotune.loaders.backends import get_backend
from autotune.loaders.presets import get_preset

needs_dali = pytest.mark.skipif(not is_available("dali"), reason="DALI is not installed")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _dali(device: str = "cpu", batch_size: int = 5) -> LoaderConfig:
    return LoaderConfig("dali", batch_size, dali=DaliOptions(device=device, num_threads=1))


def test_missing_dali_names_the_pip_extra(monkeypatch: pytest.MonkeyPatch, dataset: Dataset) -> None:
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # makes "import nvidia.dali" fail
    backend = get_backend("dali")  # the module itself imports without DALI
    with pytest.raises(UserError, match=r"\.\[dali\]") as info:
        backend.build(dataset, get_preset("imagenet-eval"), _dali(), "cpu")
    assert "\n" not in str(info.value)


@needs_dali
def test_gpu_decoding_with_cpu_target_is_a_user_error(dataset: Dataset) -> None:
    with pytest.raises(UserError, match="loader.dali.device 'gpu'.*set loader.dali.device to cpu"):
        get_backend("dali").build(dataset, get_preset("imagenet-train"), _dali("gpu"), "cpu")


@needs_dali
@pytest.mark.parametrize("kwargs", [{"shard_id": 2, "num_shards": 2}, {"shard_id": -1, "num_shards": 1}])
def test_bad_shard_is_a_user_error(dataset: Dataset, kwargs: dict) -> None:
    with pytest.raises(UserError, match="shard_id must be between"):
        get_backend("dali").build(dataset, get_preset("imagenet-eval"), _dali(), "cpu", **kwargs)


@needs_dali
def test_bad_device_string_is_a_user_error(dataset: Dataset) -> None:
    with pytest.raises(UserError, match="device must be"):
        get_backend("dali").build(dataset, get_preset("imagenet-eval"), _dali(), "gpu0")


@needs_dali
def test_non_utf8_names_are_linked_and_the_links_removed_on_close(tmp_path: Path) -> None:
    from autotune.loaders.backends._dali import dali_file_list

    good = tmp_path / "a.jpg"
    good.write_bytes(b"x")
    bad = os.fsdecode(os.path.join(os.fsencode(tmp_path), b"\xff.jpg"))
    shutil.copyfile(good, bad)
    paths, tmpdir = dali_file_list((str(good), bad))
    try:
        assert paths[0] == str(good) and tmpdir is not None
        assert paths[1].startswith(tmpdir) and paths[1].endswith(".jpg")
        paths[1].encode("utf-8")
        assert Path(paths[1]).read_bytes() == b"x"
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    assert dali_file_list((str(good),)) == ([str(good)], None)


@needs_dali
def test_close_removes_the_link_folder_and_stops_iteration(tiny_dataset: Path, tmp_path: Path) -> None:
    root = tmp_path / "ds"
    shutil.copytree(tiny_dataset, root)
    src = next((root / "class_0000").iterdir())
    os.rename(src, os.path.join(os.fsencode(root / "class_0000"), b"\xfe.jpg"))
    ds = scan(root)
    loader = get_backend("dali").build(ds, get_preset("imagenet-eval"), _dali(), "cpu")
    tmpdir = loader.tmpdir
    assert tmpdir is not None and os.path.isdir(tmpdir)
    assert sum(len(y) for _, y in loader) == len(ds)
    loader.close()
    assert not os.path.exists(tmpdir)
    with pytest.raises(UserError, match="closed"):
        iter(loader).__next__()


@needs_dali
def test_building_decodes_nothing_the_first_batch_comes_when_asked(dataset: Dataset) -> None:
    """DALI's iterator would decode its first batch while being built; building is what a loader kept for training
    pays once (AutoLoader leaves it out of a short epoch's score), so no batch may be decoded in it."""
    loader = get_backend("dali").build(dataset, get_preset("imagenet-eval"), _dali(), "cpu")
    try:
        assert loader.iterator._first_batch is None  # DALIGenericIterator(prepare_first_batch=True) fills it
        images, labels = next(iter(loader))
        assert images.shape[0] == 5 and labels.shape == (5,)
    finally:
        loader.close()


@needs_dali
def test_a_ctrl_c_while_the_pipeline_shuts_down_reaches_the_caller(dataset: Dataset, monkeypatch) -> None:
    """Left to Pipeline.__del__, a KeyboardInterrupt raised while DALI's threads stop is printed and dropped
    ("Exception ignored in ... __del__"), and a training loop that was switching loaders (AutoLoader) went on."""
    from nvidia.dali.pipeline import Pipeline

    loader = get_backend("dali").build(dataset, get_preset("imagenet-eval"), _dali(), "cpu")
    next(iter(loader))
    real = Pipeline._shutdown
    calls = []  # counts only: a pipeline kept here would be freed while the patch is undone, inside the class dict

    def interrupted(self):  # the signal arrives while the C++ Shutdown runs: Python raises it right after
        calls.append(1)
        real(self)
        if len(calls) == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(Pipeline, "_shutdown", interrupted)
    with pytest.raises(KeyboardInterrupt):
        loader.close()
    assert loader.pipeline is None and loader.iterator is None and calls
    with pytest.raises(UserError, match="closed"):
        iter(loader).__next__()


@needs_dali
@pytest.mark.parametrize("preset", ["imagenet-train", "imagenet-eval"])
def test_uneven_shards_have_no_empty_batches_and_len_holds(dataset: Dataset, preset: str) -> None:
    ds = dataclasses.replace(dataset, files=dataset.files[:23], labels=tuple(range(23)))  # shards of 11 and 12
    train = get_preset(preset).train
    seen = []
    for shard_id in range(2):
        loader = get_backend("dali").build(ds, get_preset(preset), _dali(batch_size=4), "cpu", shard_id=shard_id, num_shards=2, seed=0)
        try:
            for epoch in range(2):
                labels = [y.tolist() for _, y in loader]
                assert len(labels) == len(loader) == (2 if train else 3)
                assert all(labels)
                if epoch == 0:
                    seen += sum(labels, [])
        finally:
            loader.close()
    if not train:  # eval: every sample once, no padding duplicates
        assert sorted(seen) == list(range(23))


@needs_dali
def test_a_half_read_epoch_is_finished_before_the_next(dataset: Dataset, caplog: pytest.LogCaptureFixture) -> None:
    loader = get_backend("dali").build(dataset, get_preset("imagenet-eval"), _dali(), "cpu")
    try:
        for _ in loader:
            break
        labels = [y for _, y in loader]
        assert len(labels) == len(loader)
        assert torch.cat(labels).tolist() == list(dataset.labels)
        # read to its end, not reset half-way: DALI's "does not support resetting" warning is not printed
        assert not [r for r in caplog.records if "does not support resetting" in r.getMessage()]
    finally:
        loader.close()


@needs_dali
@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("decode", ["gpu", "cpu"])
@pytest.mark.parametrize("preset", ["imagenet-train", "imagenet-eval"])
def test_batches_land_on_the_gpu(dataset: Dataset, decode: str, preset: str) -> None:
    p = get_preset(preset)
    loader = get_backend("dali").build(dataset, p, _dali(decode), "cuda", seed=0)
    try:
        assert loader.device == f"cuda:{torch.cuda.current_device()}"
        batches = list(loader)
        assert len(batches) == len(loader)
        for x, y in batches:
            assert x.is_cuda and y.is_cuda
            assert x.dtype == torch.float32 and y.dtype == torch.int64
            assert x.shape[1:] == (3, p.crop, p.crop) and y.shape == (x.shape[0],)
    finally:
        loader.close()


@needs_dali
@pytest.mark.cuda
@needs_gpu
def test_mixed_decoder_matches_cpu_decoder(dataset: Dataset) -> None:
    """nvJPEG (``mixed``) and the CPU decoder give the same eval pictures, within JPEG decoder rounding."""
    preset = get_preset("imagenet-eval")
    out = {}
    for decode in ("gpu", "cpu"):
        loader = get_backend("dali").build(dataset, preset, _dali(decode), "cuda")
        try:
            xs, ys = zip(*loader, strict=False)
        finally:
            loader.close()
        out[decode] = (torch.cat(xs).cpu(), torch.cat(ys).cpu())
    assert out["gpu"][1].tolist() == out["cpu"][1].tolist() == list(dataset.labels)
    a, b = out["gpu"][0], out["cpu"][0]
    assert (a.mean(dim=(2, 3)) - b.mean(dim=(2, 3))).abs().max().item() < 0.03
    assert (a - b).abs().mean().item() < 0.05


@needs_dali
@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("which", ["odd", "deep"])
def test_mixed_decoder_gives_rgb_like_pil_for_odd_images(odd_images: Path, deep_images: Path, which: str) -> None:
    """Grayscale, CMYK, palette and alpha images through nvJPEG / the mixed decoder match PIL's convert("RGB"); 16-bit,
    float and EXIF-turned ones match the torch backend's reading of them."""
    ds = scan(odd_images if which == "odd" else deep_images)
    preset = get_preset("imagenet-eval")
    loader = get_backend("dali").build(ds, preset, _dali("gpu"), "cuda")
    try:
        x_dali = torch.cat([x.cpu() for x, _ in loader])
    finally:
        loader.close()
    torch_loader = get_backend("torch").build(ds, preset, LoaderConfig("torch", 5), "cpu")
    x_torch = torch.cat([x for x, _ in torch_loader])
    diff = (x_dali.mean(dim=(2, 3)) - x_torch.mean(dim=(2, 3))).abs().amax(dim=1)
    bad = [os.path.basename(ds.files[i]) for i in range(len(ds)) if diff[i] > 0.03]
    assert not bad, f"differ from PIL: {bad} ({diff.tolist()})"


@pytest.mark.parametrize(("cores", "role", "threads", "load"),
                         [(16, "dali-mixed", 12, 0.5), (32, "dali-mixed", 12, 0.5), (15, "dali-hw", 4, 1.0), (8, "dali-hw", 4, 1.0), (2, "dali-hw", 2, 1.0)])
def test_gpu_decode_has_a_second_start_mixed_on_16_cores_and_more_else_every_jpeg_on_the_hardware_decoder(cores, role, threads, load) -> None:
    """With GPU decode, the second start is at the largest batch: on 16 cores and more, three quarters of the cores (at
    most 12 threads) and half of the JPEGs on the hardware decoder (every JPEG on it spread twice as wide between fresh
    processes there); below, a few threads and every JPEG on the hardware decoder (a mixed config lost a quarter when
    held to 8 cores)."""
    from autotune.study.space import load_space

    space = load_space("default", cores=cores, device="cuda", dali=True)
    starts = get_backend("dali").starting_points(space, batch_sizes=(64, 128, 256), cores=cores, cuda=True)
    assert starts[role] == {"backend": "dali", "batch_size": 256, "dali_device": "gpu", "num_threads": threads,
                            "prefetch_queue_depth": 2, "hw_decoder_load": load}
    assert set(starts) == {"dali-heuristic", role}
    assert starts["dali-heuristic"]["hw_decoder_load"] == 0.65 and starts["dali-heuristic"]["batch_size"] == 128
    on_cpu = get_backend("dali").starting_points(load_space("default", cores=cores, device="cpu", dali=True),
                                                 batch_sizes=(64, 128, 256), cores=cores, cuda=False)
    assert list(on_cpu) == ["dali-heuristic"]  # DALI's CPU decode has one start


def test_the_starts_numbers_are_moved_into_a_narrower_space() -> None:
    """A space whose thread choices or hardware-decoder range leave out a start's numbers gets the nearest ones: a start
    outside the space is measured as a reference only, never the winner."""
    import yaml

    from autotune.study.space import parse_space

    text = """
params:
  backend: {choices: [dali]}
  batch_size: {choices: [64, 128, 256]}
  dali_device: {choices: [gpu]}
  num_threads: {choices: [2, 4, 8]}
  prefetch_queue_depth: {choices: [2]}
  hw_decoder_load: {float: [0.7, 1.0], step: 0.05}
"""
    space = parse_space(yaml.safe_load(text), cores=16)
    starts = get_backend("dali").starting_points(space, batch_sizes=(64, 128, 256), cores=16, cuda=True)
    assert starts["dali-mixed"]["num_threads"] == 8 and starts["dali-mixed"]["hw_decoder_load"] == 0.7
    assert starts["dali-heuristic"]["num_threads"] == 8 and starts["dali-heuristic"]["hw_decoder_load"] == 0.7
    for params in starts.values():
        assert all(space[k].contains(v) for k, v in params.items() if k in space and k != "backend"), params


class _FakePipeline:
    builds: list[int] = []

    def __init__(self, *, batch_size, num_threads, device_id, prefetch_queue_depth) -> None:
        self.device_id = device_id

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def set_outputs(self, *outputs) -> None:
        self.outputs = outputs

    def build(self) -> None:
        if self.device_id == 7:
            raise RuntimeError("no GPU decoder on this device")
        _FakePipeline.builds.append(self.device_id)


@pytest.fixture
def fake_dali(monkeypatch):
    """DALI's Pipeline and fn, as far as hold_decoders uses them, with nothing held yet."""
    from autotune.loaders.backends import _dali

    pytest.importorskip("nvidia.dali")
    import nvidia.dali.pipeline

    fn = SimpleNamespace(external_source=lambda **kw: ("source", kw), decoders=SimpleNamespace(image=lambda data, **kw: ("decoded", data, kw)))
    monkeypatch.setattr(_dali, "_HELD", {})
    monkeypatch.setattr(nvidia.dali, "fn", fn)
    monkeypatch.setattr(nvidia.dali.pipeline, "Pipeline", _FakePipeline)
    _FakePipeline.builds = []
    return _dali


def test_one_pipeline_with_a_gpu_decoder_is_built_once_per_device_and_kept(fake_dali):
    """The codec library's set-up, paid by every build unless a decoder stays built in the process: one, kept."""
    assert fake_dali.hold_decoders(0) and fake_dali.hold_decoders(0) and fake_dali.hold_decoders(1)
    assert _FakePipeline.builds == [0, 1] and set(fake_dali._HELD) == {0, 1}
    assert fake_dali._HELD[0].outputs[0][2]["device"] == "mixed"  # a GPU decoder: a CPU one kept changed nothing


def test_a_device_where_none_can_be_built_holds_nothing_fails_nothing_and_is_not_tried_again(fake_dali, monkeypatch):
    assert not fake_dali.hold_decoders(7) and fake_dali._HELD == {7: None}
    import nvidia.dali.pipeline

    monkeypatch.setattr(nvidia.dali.pipeline, "Pipeline", lambda **kw: pytest.fail("tried again"))
    assert not fake_dali.hold_decoders(7)


def test_building_a_pipeline_in_the_users_process_holds_no_decoder(monkeypatch):
    """build_loader and AutoLoader run in the user's process, where a torch DataLoader may fork its workers later:
    resolving the device for a build holds nothing."""
    from autotune.loaders.backends import _dali

    monkeypatch.setattr(_dali, "hold_decoders", lambda index: pytest.fail("held in a build"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert _dali._device_id("cuda", "gpu") == 0 and _dali._device_id("cuda:1", "gpu") == 1


@pytest.mark.parametrize("kind", ["dali", "dali_user"])
def test_a_dali_trial_process_readies_a_cuda_device_with_a_held_decoder_once_and_says_what_it_took(monkeypatch, kind):
    """ready_device, called as a kept trial process starts: the decoder's set-up is the process's; its seconds are
    returned the first time only (each build in a process without it pays them)."""
    import itertools

    from autotune.loaders.backends import _dali

    held: list[int] = []

    def hold(index: int) -> bool:
        held.append(index)
        _dali._HELD[index] = object()
        return True

    clock = itertools.count(step=1.5)
    monkeypatch.setattr(_dali, "_HELD", {})
    monkeypatch.setattr(_dali, "hold_decoders", hold)
    monkeypatch.setattr(_dali.time, "perf_counter", lambda: next(clock))
    backend = get_backend(kind)
    assert backend.ready_device("cpu") == 0.0 and held == []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert backend.ready_device("cuda:2") == 1.5 and held == [2]
    assert backend.ready_device("cuda:2") == 0.0 and held == [2]  # held already: nothing to price back


def test_a_device_that_holds_no_decoder_returns_no_readying(monkeypatch):
    from autotune.loaders.backends import _dali

    monkeypatch.setattr(_dali, "_HELD", {})
    monkeypatch.setattr(_dali, "hold_decoders", lambda index: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert get_backend("dali").ready_device("cuda") == 0.0


def test_the_trial_process_set_up_readies_the_device_after_starting_it(monkeypatch):
    from autotune.loaders.backends import get_backend as backends
    from autotune.trials import child, one_rank

    calls: list[str] = []
    backend = backends("dali")
    monkeypatch.setattr(backend, "preload", lambda: calls.append("preload"))
    monkeypatch.setattr(backend, "ready_device", lambda device: calls.append(f"ready {device}") or 1.25)
    monkeypatch.setattr(one_rank, "start_device", lambda device: calls.append(f"start {device}"))
    spec = SimpleNamespace(loader=LoaderConfig.from_params({"backend": "dali", "batch_size": 8, "dali_device": "gpu"}), device="cuda:1")
    took, ready = child.process_set_up(spec)
    assert took >= 0 and ready == 1.25
    assert calls == ["preload", "start cuda:1", "ready cuda:1"]
