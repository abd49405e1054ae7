"""The YAML schema: round trip, strict reading, DataLoader keywords, atomic writes."""

from __future__ import annotations

import os

import pytest
import torch

from autotune.config.files import atomic_write_text, load_config, save_config
from autotune.config.schema import Config, LoaderConfig, TorchOptions
from autotune.errors import ConfigError


def _cfg(**loader) -> Config:
    params = {"backend": "torch", "batch_size": 32, "num_workers": 2, "pin_memory": True, "prefetch_factor": 4, "persistent_workers": True}
    params.update(loader)
    return Config(loader=LoaderConfig.from_params(params), result={"samples_per_s": 100.0})


def test_round_trip(tmp_path):
    path = tmp_path / "a.yaml"
    cfg = _cfg()
    save_config(cfg, path)
    back = load_config(path)
    assert back.loader == cfg.loader
    assert back.result == cfg.result
    text = path.read_text()
    assert "num_workers: 2" in text and "schema: 1" in text


def test_dataloader_kwargs_feed_a_dataloader():
    cfg = _cfg()
    kw = cfg.dataloader_kwargs()
    assert kw == {"batch_size": 32, "num_workers": 2, "pin_memory": True, "prefetch_factor": 4, "persistent_workers": True}
    ds = torch.utils.data.TensorDataset(torch.arange(64))
    loader = torch.utils.data.DataLoader(ds, **_cfg(num_workers=0).dataloader_kwargs())
    assert len(loader) == 2


def test_no_worker_options_without_workers():
    assert TorchOptions(num_workers=0, prefetch_factor=4, persistent_workers=True) == TorchOptions()
    assert "prefetch_factor" not in _cfg(num_workers=0).dataloader_kwargs()


def test_dali_config_has_no_dataloader_kwargs():
    cfg = Config(loader=LoaderConfig.from_params({"backend": "dali", "batch_size": 64, "dali_device": "cpu", "num_threads": 2}))
    with pytest.raises(ConfigError, match="build_loader"):
        cfg.dataloader_kwargs()


@pytest.mark.parametrize(
    "text, match",
    [
        ("schema: 1\nloader: {backend: torch, batch_size: 8}\nextra: 1\n", "unknown key 'extra'"),
        ("schema: 1\nloader: {backend: torch, batch_size: 8, torch: {num_wrkers: 2}}\n", "loader.torch.num_wrkers"),
        ("schema: 1\nloader: {backend: jax, batch_size: 8}\n", "loader.backend"),
        ("schema: 2\nloader: {backend: torch, batch_size: 8}\n", "schema must be 1"),
        ("schema: 1\n", "missing the 'loader'"),
        ("- a\n- b\n", "not an autotune config"),
        ("schema: 1\nloader: {backend: torch, batch_size: 8\n", "not valid YAML"),
        ("schema: 1\nloader: {backend: dali, batch_size: 8, dali: {hw_decoder_load: 3}}\n", "between 0 and 1"),
    ],
)
def test_bad_config_files(tmp_path, text, match):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_config(path)


def test_unsafe_yaml_tags_are_refused(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("schema: 1\nloader: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "c.yaml"
    path.write_text("old\n")

    def boom(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        atomic_write_text(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["c.yaml"]  # no temp file left behind


def test_atomic_write_uses_umask(tmp_path):
    old = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "u.yaml", "x\n")
    finally:
        os.umask(old)
    assert (tmp_path / "u.yaml").stat().st_mode & 0o777 == 0o640
