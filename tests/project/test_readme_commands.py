"""The README's commands work from any folder: the shipped search spaces are found from the installed package.

Each command runs in a fresh process (``python -m autotune``) whose working folder is a temporary one, far
from the repository, with flags that keep it small (two trials, short windows, no report).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

import autotune
from autotune.study.space import load_space, resolve_path
from tests.helpers import ROOT, run_autotune

SMALL = ["--n-trials", "2", "--batch-size", "8", "--window", "0.2", "--windows", "2", "--warmup-batches", "1", "--confirm-top", "0", "--no-report", "--quiet"]


def _autotune(args: list[str], cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    return run_autotune(args, cwd, env={**os.environ, "XDG_CACHE_HOME": str(cache)})


@pytest.fixture()
def elsewhere(tmp_path) -> Path:
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    assert not (cwd / "search_spaces").exists()
    return cwd


@pytest.mark.slow
def test_quick_start_demo_runs_from_any_folder(tmp_path, elsewhere, monkeypatch):
    """``autotune run --demo``: the demo set comes from the cache folder ($XDG_CACHE_HOME), here a tiny one."""
    from autotune.dataset.synth import DEMO_COMPLETE, demo_root, synthesize

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = synthesize(demo_root(), images=24, classes=3, min_side=64, max_side=96, workers=1)
    (root / DEMO_COMPLETE).write_text("ok\n")
    p = _autotune(["run", "--demo", *SMALL], elsewhere, tmp_path / "cache")
    assert p.returncode == 0, p.stderr
    cfg = autotune.load_config(elsewhere / "autotune.yaml")
    assert cfg.dataset["path"] == str(root.resolve()) and cfg.dataset["samples"] == 24
    assert cfg.study["space"] == "default"


@pytest.mark.slow
def test_own_data_command_runs_from_any_folder(tmp_path, elsewhere, tiny_dataset):
    """``autotune run --dataset DIR`` with the default space, from a folder without search_spaces/."""
    p = _autotune(["run", "--dataset", str(tiny_dataset), *SMALL], elsewhere, tmp_path / "cache")
    assert p.returncode == 0, p.stderr
    cfg = autotune.load_config(elsewhere / "autotune.yaml")
    assert cfg.study["space"] == "default" and cfg.study["complete"] >= 1


def test_a_space_the_user_gives_wins_over_a_shipped_name(elsewhere, monkeypatch):
    monkeypatch.chdir(elsewhere)
    (elsewhere / "default").write_text("name: mine\nparams:\n  batch_size: {choices: [8]}\n")
    (elsewhere / "spaces").mkdir()
    (elsewhere / "spaces" / "small.yaml").write_text("name: small\nparams:\n  batch_size: {choices: [16]}\n")
    assert load_space("default").name == "mine"
    assert load_space("spaces/small.yaml").name == "small"
    assert load_space("torch").name == "torch"  # shipped, found by name
    assert load_space("search_spaces/cpu.yaml").name == "cpu"  # the older spelling, from any folder
    assert resolve_path("mine/missing.yaml") == Path("mine/missing.yaml")  # a path: its error says it is missing


def test_every_package_is_installed():
    """pyproject.toml lists the packages (so that search_spaces/ can install as autotune.search_spaces):
    a new sub-package must be listed too."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "autotune").rglob("__init__.py")}
    assert found | {"autotune.search_spaces"} == listed


@pytest.mark.slow
def test_a_regular_install_finds_the_shipped_spaces(tmp_path):
    """``pip install .`` (not editable) ships the spaces inside the package; they are found from any folder."""
    pytest.importorskip("setuptools")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (src / name).write_bytes((ROOT / name).read_bytes())
    import shutil

    for name in ("autotune", "search_spaces"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    site = tmp_path / "site"
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", "--target", str(site), str(src)],
        capture_output=True, text=True, timeout=300,
    )
    assert pip.returncode == 0, pip.stderr
    assert sorted(p.name for p in (site / "autotune" / "search_spaces").glob("*.yaml")) == sorted(p.name for p in (ROOT / "search_spaces").glob("*.yaml"))
    code = "import autotune; from autotune.study.space import load_space; print(autotune.__file__); print(load_space('default').source)"
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    module, source = p.stdout.split()
    assert module.startswith(str(site)) and source == str(site / "autotune" / "search_spaces" / "default.yaml")
