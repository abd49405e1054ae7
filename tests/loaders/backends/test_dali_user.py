"""The user's own DALI pipeline function as a kind of loader (``dali_user``), on the CPU: what it is called with, its
YAML section, its identity, and ``autotune.build_loader("FILE.py:FUNC", cfg)`` over a YAML of this kind."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from autotune._imports import is_available
from autotune.config.files import save_config
from autotune.config.schema import Config, LoaderConfig
from autotune.config.sections import DaliUserOptions
from autotune.dataset.user import open_target, takes_hw_decoder_load
from autotune.errors import ConfigError, UserError
from autotune.loaders.backends import get_backend
from autotune.loaders.backends._dali_user import DEFAULT_OUTPUTS, output_names, pipeline_kwargs
from autotune.loaders.presets import get_preset
from autotune.study.space import load_space

needs_dali = pytest.mark.skipif(not is_available("dali"), reason="DALI is not installed")

#: a tiny CPU pipeline over the JPEGs in images/ beside it: read, decode on the CPU, resize
PIPELINE = '''\
import os

from nvidia.dali import fn, pipeline_def

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "images")


@pipeline_def
def tiny():
    jpegs, labels = fn.readers.file(file_root=ROOT, random_shuffle=True, name="Reader")
    images = fn.decoders.image(jpegs, device="cpu")
    return fn.resize(images, resize_x=16, resize_y=16), labels


@pipeline_def
def with_hw(hw_decoder_load=0.65):
    jpegs, labels = fn.readers.file(file_root=ROOT)
    images = fn.decoders.image(jpegs, device="mixed", hw_decoder_load=hw_decoder_load)
    return fn.resize(images, resize_x=16, resize_y=16), labels


def factory():
    return tiny


@pipeline_def
def nothing():
    fn.readers.file(file_root=ROOT)


@pipeline_def
def images_only():
    jpegs, _ = fn.readers.file(file_root=ROOT)
    return fn.resize(fn.decoders.image(jpegs, device="cpu"), resize_x=16, resize_y=16)
'''


def write_pipeline(folder: Path, images: int = 10) -> Path:
    """``FILE.py`` with the pipeline functions, and ``images`` small JPEGs in two classes beside it."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(images):
        d = folder / "images" / f"class{i % 2}"
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (24, 32, 3), dtype=np.uint8)).save(d / f"{i}.jpg")
    path = folder / "my_dali.py"
    path.write_text(PIPELINE)
    return path


def _config(**options) -> Config:
    return Config(loader=LoaderConfig("dali_user", 4, section=DaliUserOptions(**options)), pipeline="imagenet-train", device="cpu")


def test_the_section_round_trips_and_is_checked() -> None:
    cfg = _config(num_threads=3, prefetch_queue_depth=2, hw_decoder_load=0.8)
    again = Config.from_dict(cfg.to_dict())
    assert again.loader == cfg.loader and again.loader.options.hw_decoder_load == 0.8
    assert cfg.to_dict()["loader"]["dali_user"] == {"num_threads": 3, "prefetch_queue_depth": 2, "hw_decoder_load": 0.8}
    assert get_backend("dali_user").describe(cfg.loader) == "dali_user b=4 threads=3 queue=2 hw_load=0.8"
    with pytest.raises(ConfigError, match="loader.dali_user.num_threads"):
        DaliUserOptions(num_threads=0)
    with pytest.raises(ConfigError, match="loader.dali_user.hw_decoder_load"):
        DaliUserOptions(hw_decoder_load=1.5)


def test_hw_decoder_load_is_passed_to_a_function_that_takes_it() -> None:
    def plain() -> None: ...

    def with_hw(hw_decoder_load: float = 0.65) -> None: ...

    plain._is_pipeline_def = with_hw._is_pipeline_def = True  # type: ignore[attr-defined] - what @pipeline_def marks
    opts = DaliUserOptions(num_threads=3, prefetch_queue_depth=1, hw_decoder_load=0.9)
    assert not takes_hw_decoder_load(plain) and takes_hw_decoder_load(with_hw)
    assert pipeline_kwargs(plain, 8, opts, None) == {"batch_size": 8, "num_threads": 3, "device_id": None, "prefetch_queue_depth": 1}
    assert pipeline_kwargs(with_hw, 8, opts, 0)["hw_decoder_load"] == 0.9
    assert pipeline_kwargs(with_hw, 8, DaliUserOptions(), 0)["hw_decoder_load"] == 0.65  # DALI's usual share when none was tuned
    with pytest.raises(UserError, match="shard_id and num_shards"):
        pipeline_kwargs(plain, 8, opts, None, shard_id=1, num_shards=2)


def test_output_names_come_from_output_map() -> None:
    def fn() -> None: ...

    assert output_names(fn) == DEFAULT_OUTPUTS == ("images", "labels")
    fn.output_map = ["data", "label", "meta"]  # type: ignore[attr-defined] - the user's attribute
    assert output_names(fn) == ("data", "label", "meta")
    fn.output_map = "data"  # type: ignore[attr-defined] - a string, not a list of names
    with pytest.raises(UserError, match="output_map"):
        output_names(fn)


@needs_dali
def test_the_space_leaves_out_hw_decoder_load_without_a_gpu() -> None:
    assert "hw_decoder_load" not in load_space("dali_user", cores=2, device="cpu")
    assert "hw_decoder_load" in load_space("dali_user", cores=2, device="cuda")


@needs_dali
def test_the_identity_of_a_pipeline_function_is_recorded(tmp_path: Path) -> None:
    path = write_pipeline(tmp_path)
    for func in ("tiny", "factory"):  # the function itself, or a function that returns it
        ds, _ = open_target(f"{path}:{func}")
        assert ds.dali and ds.iterable and not ds.hw_decoder_load and len(ds.sha256) == 64
        assert ds.summary()["function"]["name"] == f"my_dali:{func}" and ds.root == f"{path}:{func}"
    assert open_target(f"{path}:with_hw")[0].hw_decoder_load  # its signature takes it (GPU decode: not built here)


@needs_dali
def test_the_backend_builds_the_function_on_the_cpu_and_counts_each_batch(tmp_path: Path) -> None:
    ds, _ = open_target(f"{write_pipeline(tmp_path)}:tiny")
    loader = get_backend("dali_user").build(ds, get_preset("imagenet-train"), _config(num_threads=1).loader, "cpu", seed=1)
    try:
        batches = list(loader)
        assert len(loader) == 2 and [b[-1].shape[0] for b in batches] == [4, 4]  # 10 images, the last partial batch dropped
        assert tuple(batches[0][0].shape) == (4, 16, 16, 3)
        assert len(list(loader)) == 2  # a second epoch
    finally:
        loader.close()


@needs_dali
def test_outputs_that_their_names_do_not_match_are_one_line_naming_output_map(tmp_path: Path) -> None:
    """One output and the default two names: DALIGenericIterator's KeyError 'labels', which named neither."""
    ds, _ = open_target(f"{write_pipeline(tmp_path)}:images_only")
    with pytest.raises(UserError, match=r"^images_only returns 1 output, but 2 are named by default \['images', 'labels'\]; return as many, "
                                        r"or set images_only.output_map = \[one name for each output\]$"):
        get_backend("dali_user").build(ds, get_preset("imagenet-train"), _config(num_threads=1).loader, "cpu", seed=1)
    from autotune.dataset.user import pipeline_function

    ds_none, _ = open_target(f"{tmp_path / 'my_dali.py'}:nothing")  # DALI's own line: NotImplementedError, no message, in its define_graph
    with pytest.raises(UserError, match=r"^nothing returns no output; return the pipeline's outputs \(such as images, labels\)$"):
        get_backend("dali_user").build(ds_none, get_preset("imagenet-train"), _config(num_threads=1).loader, "cpu", seed=1)
    pipeline_function(f"{tmp_path / 'my_dali.py'}:images_only").output_map = ["images"]  # type: ignore[attr-defined] - the user's attribute
    loader = get_backend("dali_user").build(ds, get_preset("imagenet-train"), _config(num_threads=1).loader, "cpu", seed=1)
    try:
        assert [tuple(b[1].shape) for b in loader] == [(4, 0), (4, 0)]  # no labels: an empty tensor of the batch's length
    finally:
        loader.close()


@needs_dali
def test_build_loader_over_a_yaml_of_this_kind_returns_the_dali_iterator(tmp_path: Path) -> None:
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    import autotune

    target = f"{write_pipeline(tmp_path)}:tiny"
    yaml_path = tmp_path / "autotune.yaml"
    save_config(_config(num_threads=2, prefetch_queue_depth=1), yaml_path)
    it = autotune.build_loader(target, str(yaml_path))
    assert isinstance(it, DALIGenericIterator)
    assert [tuple(b[0]["images"].shape)[0] for b in it] == [4, 4]


def test_a_pipeline_file_without_dali_installed_is_one_line_naming_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_pipeline(tmp_path, images=0)
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # makes "import nvidia.dali" fail
    monkeypatch.delitem(sys.modules, "my_dali", raising=False)
    with pytest.raises(UserError, match=r"\.\[dali\]"):
        open_target(f"{path}:tiny")


@needs_dali
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_function_gets_the_device_and_its_hw_decoder_load(tmp_path: Path) -> None:
    ds, _ = open_target(f"{write_pipeline(tmp_path)}:with_hw")
    cfg = _config(num_threads=2, hw_decoder_load=0.5)
    loader = get_backend("dali_user").build(ds, get_preset("imagenet-train"), cfg.loader, "cuda", seed=1)
    try:
        images, labels = next(iter(loader))
        assert images.is_cuda and tuple(images.shape) == (4, 16, 16, 3) and labels.shape[0] == 4
    finally:
        loader.close()
