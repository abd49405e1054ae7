"""The dataset walk ends: the kernel's file systems are not walked, and a folder reached twice is walked once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.dataset.scan import pseudo_file_system, scan

on_linux_sys = pytest.mark.skipif(pseudo_file_system("/sys") is None, reason="needs /sys mounted as sysfs")


def _jpeg(path: Path) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), (90, 120, 30)).save(path, "JPEG")


@on_linux_sys
def test_check_of_a_yaml_naming_sys_ends_in_one_line(tmp_path):
    """`autotune check` on a YAML whose dataset.path is /sys walked symlink cycles past 120 s at 2.6 GB."""
    code = (
        "from autotune.config import fingerprint\n"
        "from autotune.config.files import save_config\n"
        "from autotune.config.schema import Config, LoaderConfig\n"
        "loader = LoaderConfig.from_params({'backend': 'torch', 'batch_size': 8, 'num_workers': 1})\n"
        f"save_config(Config(loader=loader, hardware=fingerprint.collect(), dataset={{'path': '/sys', 'samples': 24}}), {str(tmp_path / 'a.yaml')!r})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    p = subprocess.run([sys.executable, "-m", "autotune", "check", str(tmp_path / "a.yaml")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "sysfs file system" in p.stderr and "--no-dataset" in p.stderr


@on_linux_sys
def test_a_class_folder_linking_into_sys_is_skipped_with_its_reason(tmp_path, caplog):
    _jpeg(tmp_path / "cat" / "1.jpg")
    os.symlink("/sys/bus", tmp_path / "cat" / "bus")
    ds = scan(tmp_path)
    assert len(ds.files) == 1
    assert "on a sysfs file system" in caplog.text


def test_a_folder_linked_twice_in_a_class_is_walked_once(tmp_path):
    _jpeg(tmp_path / "cat" / "real" / "1.jpg")
    os.symlink(tmp_path / "cat" / "real", tmp_path / "cat" / "again")
    os.symlink(tmp_path / "cat" / "real", tmp_path / "cat" / "more")
    ds = scan(tmp_path)
    assert [os.path.relpath(f, tmp_path) for f in ds.files] == ["cat/again/1.jpg"]
