"""A trial's temp folder: its owner written inside, and removed by a later run when a SIGKILL left it behind."""

from __future__ import annotations

import os
import socket
import tempfile

from autotune.dataset.scan import scan
from autotune.study.space import load_space
from autotune.study.tuner import Tuner, TuneSettings
from autotune.trials.runner import OWNER_FILE, TMP_PREFIX, remove_stale_tmpdirs, trial_tmpdir

GONE_PID = 2**22 + 12345  # above Linux's highest PID: no process has it


def _folder(root, name: str, owner: str | None, made: float | None = None) -> str:
    path = os.path.join(root, TMP_PREFIX + name)
    os.makedirs(os.path.join(path, "pymp-abc123"))  # what a killed DataLoader worker leaves
    if owner is not None:
        marker = os.path.join(path, OWNER_FILE)
        with open(marker, "w") as f:
            f.write(owner)
        if made is not None:
            os.utime(marker, (made, made))
    return path


def test_issue_42_item_5_the_temp_folders_of_dead_runs_are_removed_never_a_live_ones(tmp_path):
    """Issue 42, item 5: after a SIGKILL of ``autotune run`` mid-trial, its ``autotune-trial-*`` folder (with
    ``pymp-*`` inside) stayed, and ``--resume`` did not remove it."""
    host = socket.gethostname()
    dead = _folder(tmp_path, f"{GONE_PID}-a", f"{host}:{GONE_PID}")
    reused = _folder(tmp_path, f"{os.getpid()}-b", f"{host}:{os.getpid()}", made=1000.0)  # the PID now another process's
    live = _folder(tmp_path, f"{os.getppid()}-c", f"{host}:{os.getppid()}")
    elsewhere = _folder(tmp_path, f"{GONE_PID}-d", f"another-{host}:{GONE_PID}")
    unknown = _folder(tmp_path, "e", None)  # an older version's: its owner unknown
    assert sorted(remove_stale_tmpdirs(str(tmp_path))) == sorted([dead, reused])
    assert not os.path.exists(dead) and not os.path.exists(reused)
    assert all(os.path.isdir(os.path.join(p, "pymp-abc123")) for p in (live, elsewhere, unknown))


def test_a_trial_folder_names_its_owner_and_a_new_run_removes_a_dead_ones(tiny_dataset, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ours = trial_tmpdir()
    assert os.path.basename(ours).startswith(f"{TMP_PREFIX}{os.getpid()}-")
    with open(os.path.join(ours, OWNER_FILE)) as f:
        assert f.read() == f"{socket.gethostname()}:{os.getpid()}"
    dead = _folder(tmp_path, f"{GONE_PID}-a", f"{socket.gethostname()}:{GONE_PID}")
    Tuner(scan(tiny_dataset), load_space("cpu", cores=2), TuneSettings(cores=2), storage=f"sqlite:///{tmp_path}/t.db", study_name="t")
    assert not os.path.exists(dead) and os.path.isdir(ours)  # a run starting removes what a dead one left, never a live one's
