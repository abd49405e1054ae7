"""``autotune run --dataset FILE.py:FUNC`` with a DALI pipeline function: tuned end to end on the CPU (a CPU-only
pipeline, ``device_id=None``), its identity in the YAML, which ``autotune check`` compares."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autotune._imports import is_available
from autotune.cli import main
from autotune.study import fleet
from tests.cli.test_run_user import FAST
from tests.loaders.backends.test_dali_user import write_pipeline

pytestmark = pytest.mark.skipif(not is_available("dali"), reason="DALI is not installed")


@pytest.mark.slow
def test_a_dali_pipeline_function_is_tuned_and_a_changed_source_is_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    path = write_pipeline(tmp_path, images=16)
    assert main(["run", "--dataset", "my_dali.py:tiny", "--batch-size", "4", "--n-trials", "3", *FAST]) == 0
    data = yaml.safe_load(Path("autotune.yaml").read_text())
    assert data["loader"]["backend"] == "dali_user" and data["loader"]["batch_size"] == 4 and data["result"]["samples_per_s"] > 0
    assert set(data["loader"]["dali_user"]) == {"num_threads", "prefetch_queue_depth"}  # no hw_decoder_load: not taken, no GPU
    function = data["dataset"]["function"]
    assert function["name"] == "my_dali:tiny" and len(function["sha256"]) == 64 and data["dataset"]["path"] == f"{path}:tiny"
    capsys.readouterr()
    assert main(["check", "autotune.yaml"]) == 0
    path.write_text(path.read_text() + "\n# a changed pipeline\n")
    assert main(["check", "autotune.yaml"]) == 1
    assert "dataset.signature" in capsys.readouterr().out
    warned: list[str] = []
    monkeypatch.setattr(fleet.logger, "warning", lambda msg, *args: warned.append(msg % args))
    assert main(["run", "--if-stale", "autotune.yaml", "--n-trials", "2", *FAST]) == 0  # re-tuned with the same --dataset
    assert not [w for w in warned if "does not tune" in w]  # its winner warm-starts the space dali_user
    assert yaml.safe_load(Path("autotune.yaml").read_text())["loader"]["backend"] == "dali_user"
    assert main(["check", "autotune.yaml"]) == 0


def test_a_dali_pipeline_function_needs_its_batch_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    write_pipeline(tmp_path, images=4)
    assert main(["run", "--dataset", "my_dali.py:tiny", "--n-trials", "1", *FAST]) == 2
    assert "--batch-size" in capsys.readouterr().err
