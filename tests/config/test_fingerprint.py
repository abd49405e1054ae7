from __future__ import annotations

import os
import warnings

import pytest

from autotune.config import fingerprint
from autotune.config.files import load_config, save_config
from autotune.config.schema import Config, LoaderConfig
from autotune.errors import StaleConfigError


def _cfg(hardware: dict, dataset: dict | None = None) -> Config:
    loader = LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": 1})
    return Config(loader=loader, hardware=hardware, dataset=dataset or {"path": "/nonexistent/train", "samples": 24})


def test_collect_has_every_field():
    fp = fingerprint.collect()
    for k in (*fingerprint.MATTERS, *fingerprint.INFO):
        assert k in fp
    assert fp["cpus"] >= 1


def test_usable_cpus_respects_affinity_and_quota(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.setattr(fingerprint, "cgroup_cpu_limit", lambda: 4.5)
    assert fingerprint.usable_cpus() == 4
    monkeypatch.setattr(fingerprint, "cgroup_cpu_limit", lambda: None)
    assert fingerprint.usable_cpus() == 16
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert fingerprint.usable_cpus() == 2


def test_the_cpu_quota_of_the_process_own_cgroup_counts(tmp_path):
    """``docker run --cpus 4`` without a cgroup namespace, a Slurm job, a systemd slice: the quota sits on this
    process's own cgroup (or one above it), not on the root's ``cpu.max``, which the quota was read from alone."""
    root = tmp_path / "cgroup"
    job = root / "system.slice" / "job.scope"
    job.mkdir(parents=True)
    own = tmp_path / "self-cgroup"
    own.write_text("0::/system.slice/job.scope\n")
    assert fingerprint.cgroup_cpu_limit(root, own) is None  # no cpu.max anywhere: unlimited
    (job / "cpu.max").write_text("400000 100000\n")
    (root / "system.slice" / "cpu.max").write_text("max 100000\n")
    assert fingerprint.cgroup_cpu_limit(root, own) == 4.0
    (root / "system.slice" / "cpu.max").write_text("250000 100000\n")  # the slice above holds less: it wins
    assert fingerprint.cgroup_cpu_limit(root, own) == 2.5
    own.write_text("0::/\n")  # a container with its own cgroup namespace: its cgroup is the root
    (root / "cpu.max").write_text("600000 100000\n")
    assert fingerprint.cgroup_cpu_limit(root, own) == 6.0


UUIDS = ["GPU-aaaa-0", "GPU-bbbb-1", "GPU-cccc-2", "GPU-dddd-3"]


@pytest.mark.parametrize(("visible", "gpus"), [
    (None, [0, 1, 2, 3]), ("", []), ("2,0", [2, 0]),
    ("-1", []),  # the usual way to hide every GPU: it read as one GPU, and the run chose cuda
    ("1,9,2", [1]),  # CUDA stops at the first entry that names no GPU
    ("1,1", []),  # a GPU named twice hides them all
    ("GPU-cccc", [2]), ("GPU-bbbb-1,GPU-dddd-3", [1, 3]),  # UUIDs, or their leading part: they read as every GPU
    ("GPU-zzzz,GPU-aaaa-0", []), ("GPU-", []),
])
def test_visible_gpus_read_as_cuda_reads_them(visible, gpus):
    assert fingerprint.visible_gpus(visible, 4, UUIDS.__getitem__) == gpus


@pytest.mark.parametrize(
    ("field", "value"),
    [("gpu", "NVIDIA A100-SXM4-80GB"), ("cpus", 128), ("dali", "1.30.0"), ("torch", "1.13.0"), ("gpus", 8)],
)
def test_a_change_that_matters(field, value):
    now = fingerprint.collect()
    diffs = fingerprint.diff({**now, field: value}, now)
    assert [(d.field, d.matters) for d in diffs] == [(field, True)]


@pytest.mark.parametrize(("field", "value"), [("hostname", "another-node"), ("ram_gib", 1.0), ("shm_mib", 64)])
def test_a_change_that_does_not_matter(field, value):
    now = fingerprint.collect()
    diffs = fingerprint.diff({**now, field: value}, now)
    assert [(d.field, d.matters) for d in diffs] == [(field, False)]


def test_key_ignores_what_does_not_matter():
    fp = fingerprint.collect()
    assert fingerprint.key(fp, "sig") == fingerprint.key({**fp, "hostname": "x", "ram_gib": 1}, "sig")
    assert fingerprint.key(fp, "sig") != fingerprint.key({**fp, "cpus": fp["cpus"] + 1}, "sig")
    assert fingerprint.key(fp, "sig") != fingerprint.key(fp, "other")


def test_dataset_summary_and_diff(tiny_dataset, tmp_path):
    import shutil

    old = fingerprint.dataset_summary(tiny_dataset)
    assert old["samples"] == 24 and old["mean_bytes"] > 0 and len(old["signature"]) == 16
    copy = tmp_path / "copy"
    shutil.copytree(tiny_dataset, copy)
    same = fingerprint.dataset_summary(copy)
    assert [(d.field, d.matters) for d in fingerprint.diff_dataset(old, same)] == [("dataset.path", False)]
    jpgs = sorted(copy.rglob("*.jpg"))
    jpgs[0].unlink()  # one of 24 (4 %): in the same folder shown, but a dataset that grows or shrinks a little is not re-tuned
    small = fingerprint.diff_dataset(same, fingerprint.dataset_summary(copy))
    assert {d.field for d in small} >= {"dataset.samples", "dataset.signature"} and not any(d.matters for d in small)
    elsewhere = {d.field for d in fingerprint.diff_dataset(old, fingerprint.dataset_summary(copy)) if d.matters}
    assert elsewhere == {"dataset.signature"}  # another folder with other files: its counts alike or not, it matters
    for p in jpgs[1:6]:  # a quarter gone: the config is stale
        p.unlink()
    changed = {d.field for d in fingerprint.diff_dataset(same, fingerprint.dataset_summary(copy)) if d.matters}
    assert changed == {"dataset.samples"}  # judged by the counts


def test_load_config_warns_or_raises_on_a_change_that_matters(tmp_path):
    now = fingerprint.collect()
    path = tmp_path / "a.yaml"
    save_config(_cfg({**now, "gpu": "Imaginary GPU"}), path)
    with pytest.warns(UserWarning, match="gpu") as seen:
        load_config(path)
    hint = str(seen[0].message).split("re-tune with ")[1]
    assert hint.startswith("'autotune run --dataset ") and f"--warm-start {path}" in hint  # a command that runs as given
    with pytest.raises(StaleConfigError, match="Imaginary GPU"):
        load_config(path, strict=True)


def test_load_config_quiet_when_only_the_hostname_changed(tmp_path):
    path = tmp_path / "a.yaml"
    save_config(_cfg({**fingerprint.collect(), "hostname": "elsewhere"}), path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_config(path, strict=True)
