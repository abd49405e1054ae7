from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from autotune import doctor
from autotune.cli import main
from autotune.config import fingerprint
from autotune.dataset import pagecache
from autotune.doctor import Status
from autotune.errors import UserError

H200 = {"gpu": "NVIDIA H200", "gpus": 1, "gpu_mib": 143771, "driver": "580.95.05", "cuda": "13.0"}
NO_GPU = {"gpu": None, "gpus": 0, "gpu_mib": None, "driver": None, "cuda": None}
TORCH_CU130 = {"torch": "2.9.0+cu130", "torchvision": "0.24.0+cu130", "cuda": "13.0", "available": True, "devices": 1}


@pytest.fixture()
def machine(monkeypatch):
    """A healthy GPU machine: every check ok. Tests change one thing at a time."""
    monkeypatch.setattr(doctor._probes, "nvml_error", lambda: None)
    monkeypatch.setattr(fingerprint, "gpu_info", lambda: dict(H200))
    monkeypatch.setattr(doctor._probes, "torch_probe", lambda: dict(TORCH_CU130))
    monkeypatch.setattr(fingerprint, "dali_install", lambda: ("2.4.0", "cuda130"))
    monkeypatch.setattr(doctor._probes, "dali_importable", lambda: True)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.setattr(doctor._probes, "cpu_count", lambda: 16)
    monkeypatch.setattr(fingerprint, "cgroup_cpu_limit", lambda: None)
    monkeypatch.setattr(fingerprint, "shm_bytes", lambda: 64 * 2**30)
    monkeypatch.setattr(doctor._probes, "memlock_bytes", lambda: None)
    monkeypatch.setattr(doctor._probes, "container", lambda: "docker")
    monkeypatch.setattr(doctor._probes, "source_checkout", lambda: True)
    monkeypatch.setattr(doctor._probes, "memory_available", lambda: 64 * 2**30)
    monkeypatch.setattr(pagecache, "fits_in_ram", lambda ds, fraction=0.5: True)
    return monkeypatch


@pytest.fixture()
def four_jpegs(tmp_path):
    from autotune.dataset.synth import synthesize

    return synthesize(tmp_path / "data", images=4, classes=2, min_side=32, max_side=48, workers=1)


def checks_by_name(**kw):
    return {c.name: c for c in doctor.run_checks(smoke=False, **kw)}


def test_healthy_machine_is_all_ok(machine):
    checks = doctor.run_checks(smoke=False)
    assert [c for c in checks if c.status is not Status.OK] == []
    assert doctor.exit_code(checks) == 0
    by = {c.name: c for c in checks}
    assert by["gpus"].value == "1 x NVIDIA H200, 143771 MiB, driver 580.95.05 (CUDA 13.0)"
    assert by["dali"].value == "2.4.0 (cuda130)"


@pytest.fixture()
def cpu_only(machine):
    """A machine without an NVIDIA driver, healthy for CPU use."""
    machine.setattr(doctor._probes, "nvml_error", lambda: "NVML Shared Library Not Found")
    machine.setattr(fingerprint, "gpu_info", lambda: dict(NO_GPU))
    machine.setattr(doctor._probes, "torch_probe", lambda: {**TORCH_CU130, "available": False, "devices": 0})
    machine.setattr(doctor._probes, "memlock_bytes", lambda: 8 * 2**20)
    return machine


def test_no_gpu_is_information_on_a_cpu_only_machine(cpu_only):
    by = checks_by_name()
    assert by["gpus"].status is Status.OK and by["gpus"].fix is None
    assert by["gpus"].value == "none: no NVIDIA driver visible (a container without --gpus all?); trials run on the CPU"
    assert by["cuda"].status is Status.OK and by["cuda"].value.startswith("no (no GPU visible")
    for name in ("driver-torch", "driver-dali"):
        assert (by[name].status, by[name].value) == (Status.OK, "skipped (no GPU)")
    assert by["memlock"].status is Status.OK  # pinned memory is not used without a GPU
    assert doctor.exit_code(list(by.values())) == 0


def test_doctor_exits_0_on_a_cpu_only_machine_where_nothing_fails(cpu_only, capsys):
    assert main(["doctor", "--no-smoke"]) == 0
    text = capsys.readouterr().out
    assert "fix:" not in text and text.rstrip().endswith("11 ok, 0 warn, 0 fail")
    assert main(["doctor", "--no-smoke", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "ok"
    cpu_only.setattr(fingerprint, "cgroup_cpu_limit", lambda: 4.0)  # a real warning still counts
    assert main(["doctor", "--no-smoke"]) == 1


def test_no_gpu_on_bare_metal_says_install_the_driver_when_cuda_is_asked_for(cpu_only):
    cpu_only.setattr(doctor._probes, "container", lambda: None)
    assert checks_by_name()["gpus"].value == "none: no NVIDIA driver visible; trials run on the CPU"
    with pytest.raises(UserError, match="fix: install the NVIDIA driver"):
        doctor.preflight(None, "cuda")


def test_gpu_seen_by_driver_but_not_by_torch_fails(machine):
    machine.setattr(doctor._probes, "torch_probe", lambda: {**TORCH_CU130, "cuda": None, "available": False, "devices": 0, "torch": "2.9.0+cpu"})
    by = checks_by_name()
    assert by["cuda"].status is Status.FAIL
    assert by["driver-torch"].status is Status.FAIL and by["driver-torch"].value == "torch 2.9.0+cpu is a CPU-only build"
    assert by["driver-torch"].fix.endswith("--index-url https://download.pytorch.org/whl/cu130")


def test_torch_cuda_newer_than_driver_fails(machine):
    machine.setattr(fingerprint, "gpu_info", lambda: {**H200, "driver": "550.54.15", "cuda": "12.4"})
    machine.setattr(fingerprint, "dali_install", lambda: ("2.4.0", "cuda120"))
    c = checks_by_name()["driver-torch"]
    assert c.status is Status.FAIL
    assert c.value == "torch is built for CUDA 13.0, driver 550.54.15 supports CUDA 12.4"
    assert c.fix.startswith("upgrade the NVIDIA driver to >= 580, or: pip install")
    assert c.fix.endswith("/whl/cu126")


@pytest.mark.parametrize(
    ("gpu", "source", "fix"),
    [
        ({**H200}, True, 'pip install -e ".[dali-cu13]"'),
        ({**H200, "driver": "550.54.15", "cuda": "12.4"}, True, 'pip install -e ".[dali]"'),
        ({**H200}, False, "pip install nvidia-dali-cuda130"),
        ({**H200, "driver": "535.1", "cuda": "12.2"}, False, "pip install nvidia-dali-cuda120"),
        (NO_GPU, True, 'pip install -e ".[dali]"'),  # no driver: the default wheel, whatever CUDA torch was built for
        (NO_GPU, False, "pip install nvidia-dali-cuda120"),
    ],
)
def test_dali_missing_names_the_install_command_for_this_driver(machine, gpu, source, fix):
    machine.setattr(fingerprint, "gpu_info", lambda: gpu)
    machine.setattr(fingerprint, "dali_install", lambda: (None, None))
    machine.setattr(doctor._probes, "dali_importable", lambda: False)
    machine.setattr(doctor._probes, "source_checkout", lambda: source)
    by = checks_by_name()
    assert by["dali"].status is Status.WARN
    assert by["dali"].value == "not installed: only the torch backend can be tuned"
    assert by["dali"].fix == fix
    assert by["driver-dali"].value == "skipped (DALI not installed)"


def test_dali_wheel_that_cannot_import_fails(machine):
    machine.setattr(doctor._probes, "dali_importable", lambda: False)
    c = checks_by_name()["dali"]
    assert c.status is Status.FAIL and c.fix == "pip install --force-reinstall nvidia-dali-cuda130"


def test_driver_too_old_for_dali_flavour_fails(machine):
    machine.setattr(fingerprint, "gpu_info", lambda: {**H200, "driver": "550.54.15", "cuda": "12.4"})
    c = checks_by_name()["driver-dali"]
    assert c.status is Status.FAIL
    assert c.value == "nvidia-dali-cuda130 needs driver >= 580, found 550.54.15"
    assert c.fix == 'pip uninstall -y nvidia-dali-cuda130 && pip install -e ".[dali]"'


def test_dockers_shm_warns_with_the_shm_size_fix(machine):
    machine.setattr(fingerprint, "shm_bytes", lambda: 64 * 2**20)  # Docker's default: workers run, joining smaller batches
    c = checks_by_name()["shm"]
    assert c.status is Status.WARN
    assert c.value.startswith("/dev/shm 64 MiB < 110 MiB that 1 worker at batch 64 needs; ")  # 2 prefetched + the loop's
    assert c.fix == "restart the container with --shm-size=6g (Kubernetes: mount an emptyDir with medium: Memory at /dev/shm)"


def test_tiny_shm_fails_with_the_shm_size_fix(machine):
    machine.setattr(fingerprint, "shm_bytes", lambda: 1 * 2**20)  # not one sample per worker's buffers
    c = checks_by_name()["shm"]
    assert c.status is Status.FAIL
    assert c.value == "/dev/shm 1 MiB < 2 MiB that 1 worker handing over 1 sample at a time needs"
    assert c.fix == "restart the container with --shm-size=6g (Kubernetes: mount an emptyDir with medium: Memory at /dev/shm)"


def test_small_shm_warns_and_host_fix_remounts(machine):
    machine.setattr(fingerprint, "shm_bytes", lambda: 2 * 2**30)
    machine.setattr(doctor._probes, "container", lambda: None)
    c = checks_by_name()["shm"]
    assert c.status is Status.WARN
    assert c.fix == "sudo mount -o remount,size=6G /dev/shm"


def test_cpu_quota_below_core_count_warns(machine):
    machine.setattr(fingerprint, "cgroup_cpu_limit", lambda: 4.0)
    c = checks_by_name()["cpus"]
    assert c.status is Status.WARN
    assert c.value == "4 usable of 16 (affinity 16, cgroup quota 4 CPUs)"
    assert c.fix == "tuning sizes workers for 4 cores; to use all 16, raise the CPU limit (docker run --cpus 16; Kubernetes: resources.limits.cpu)"


def test_cpu_affinity_below_core_count_warns(machine):
    machine.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    c = checks_by_name()["cpus"]
    assert c.status is Status.WARN and "taskset" in c.fix


def test_low_memlock_with_gpu_warns(machine):
    machine.setattr(doctor._probes, "memlock_bytes", lambda: 8 * 2**20)
    c = checks_by_name()["memlock"]
    assert c.status is Status.WARN and c.fix.startswith("raise the locked-memory limit: docker run --ulimit memlock=-1")


def test_unreadable_image_warns_and_names_it(machine, four_jpegs):
    bad = four_jpegs / "class_0000" / "broken.jpg"
    bad.write_bytes(b"this is not a JPEG")
    by = checks_by_name(dataset=four_jpegs)
    assert by["dataset"].status is Status.OK
    assert by["dataset"].value.startswith("4 images, 2 classes, JPEG 4, mean")  # the scan skips it ...
    c = by["unreadable"]
    assert c.status is Status.WARN  # ... and the doctor names it
    assert c.value.startswith(f"1 unreadable, first {bad}: ")
    assert c.fix == f"remove or re-encode them (first: {bad}); trials that read one fail as bad-data"
    assert by["page-cache"].value.startswith("fits:")


def test_all_images_unreadable_fails_and_stops_preflight(machine, tmp_path):
    (tmp_path / "d" / "a").mkdir(parents=True)
    (tmp_path / "d" / "a" / "x.jpg").write_bytes(b"junk")
    # the scan already refuses a dataset with no readable image: the dataset check fails and names the fix
    c = checks_by_name(dataset=tmp_path / "d")["dataset"]
    assert c.status is Status.FAIL and "no readable images" in c.value
    with pytest.raises(UserError, match="no readable images"):
        doctor.preflight(tmp_path / "d", "cpu")


def test_missing_dataset_fails_with_the_scan_fix(machine, tmp_path):
    c = checks_by_name(dataset=tmp_path / "nope")["dataset"]
    assert c.status is Status.FAIL and c.fix.startswith("check the path")


def test_dataset_larger_than_memory_is_measured_cold(machine, four_jpegs):
    machine.setattr(pagecache, "fits_in_ram", lambda ds, fraction=0.5: False)
    c = checks_by_name(dataset=four_jpegs)["page-cache"]
    assert c.status is Status.OK and c.value.startswith("does not fit") and "cold" in c.value


def test_preflight_passes_a_healthy_machine(machine, four_jpegs):
    checks = doctor.preflight(four_jpegs, "cuda")
    assert {c.name for c in checks} >= {"gpus", "shm", "dataset"}


def test_preflight_cuda_without_gpu_stops_with_the_fix(machine):
    machine.setattr(doctor._probes, "nvml_error", lambda: "NVML Shared Library Not Found")
    machine.setattr(fingerprint, "gpu_info", lambda: dict(NO_GPU))
    machine.setattr(doctor._probes, "torch_probe", lambda: {**TORCH_CU130, "available": False, "devices": 0})
    with pytest.raises(UserError) as e:
        doctor.preflight(None, "cuda")
    assert "device cuda needs a GPU torch can use; gpus check failed" in str(e.value)
    assert "fix: start the container with --gpus all" in str(e.value)
    assert "\n" not in str(e.value)
    doctor.preflight(None, "cpu")  # the CPU still works


def test_preflight_tiny_shm_stops_only_when_workers_are_needed(machine):
    machine.setattr(fingerprint, "shm_bytes", lambda: 64 * 2**20)
    doctor.preflight(None, "cpu")  # Docker's default: the workers hand over smaller batches, joined
    machine.setattr(fingerprint, "shm_bytes", lambda: 2**20)
    with pytest.raises(UserError, match="--shm-size=6g"):
        doctor.preflight(None, "cpu")
    doctor.preflight(None, "cpu", workers=False)  # a DALI-only space does not use /dev/shm


def _fake_child(code: str):
    def start(kind, root):
        return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)

    return start


def test_smoke_without_gpu_skips_dali_gpu(machine):
    machine.setattr(doctor._probes, "nvml_error", lambda: "NVML Shared Library Not Found")
    machine.setattr(fingerprint, "gpu_info", lambda: dict(NO_GPU))
    started = []
    fake = _fake_child("print('{\"value\": \"batch ok\"}')")
    machine.setattr(doctor._smoke, "_start_smoke", lambda kind, root: started.append(kind) or fake(kind, root))
    by = {c.name: c for c in doctor.run_checks(smoke=True)}
    assert started == ["torch", "dali-cpu"]
    assert by["smoke-torch"].value == by["smoke-dali-cpu"].value == "batch ok"
    assert (by["smoke-dali-gpu"].status, by["smoke-dali-gpu"].value) == (Status.OK, "skipped (no GPU)")


def test_smoke_without_dali_skips_both_dali_tests(machine):
    machine.setattr(fingerprint, "dali_install", lambda: (None, None))
    machine.setattr(doctor._probes, "dali_importable", lambda: False)
    machine.setattr(doctor._smoke, "_start_smoke", _fake_child("print('{\"value\": \"batch ok\"}')"))
    by = {c.name: c for c in doctor.run_checks(smoke=True)}
    assert by["smoke-dali-cpu"].value == by["smoke-dali-gpu"].value == "skipped (DALI not installed)"


def test_smoke_hang_is_killed_and_fails(machine):
    machine.setattr(doctor._smoke, "SMOKE_TIMEOUT_S", 1.0)
    machine.setattr(doctor._smoke, "_start_smoke", _fake_child("import time; time.sleep(60)"))
    by = {c.name: c for c in doctor.run_checks(smoke=True)}
    for name in ("smoke-torch", "smoke-dali-cpu", "smoke-dali-gpu"):
        assert by[name].status is Status.FAIL and by[name].value == "hung: no batch within 1 s (killed)"
    reinstall = 'reinstall the DALI wheel for this machine: pip uninstall -y nvidia-dali-cuda130 && pip install -e ".[dali-cu13]"'
    assert by["smoke-dali-gpu"].fix.startswith(reinstall)


def test_smoke_crash_reports_the_error(machine):
    machine.setattr(
        doctor._smoke, "_start_smoke", _fake_child("import sys; sys.exit('RuntimeError: DataLoader worker (pid 7) is killed by signal: Bus error')")
    )
    c = {c.name: c for c in doctor.run_checks(smoke=True)}["smoke-torch"]
    assert c.status is Status.FAIL and "Bus error" in c.value
    assert c.fix.startswith("/dev/shm is too small for the workers: restart the container with --shm-size=")


def test_cli_json_and_table_exit_codes(machine, capsys):
    machine.setattr(fingerprint, "cgroup_cpu_limit", lambda: 4.0)
    assert main(["doctor", "--json", "--no-smoke"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "warn" and out["exit_code"] == 1
    cpus = next(c for c in out["checks"] if c["name"] == "cpus")
    assert cpus["status"] == "warn" and cpus["fix"].startswith("tuning sizes workers for 4 cores")
    machine.setattr(fingerprint, "shm_bytes", lambda: 2**20)
    assert main(["doctor", "--no-smoke"]) == 2
    text = capsys.readouterr().out
    assert "fail shm: fix: restart the container with --shm-size=" in text
    assert "warn cpus: fix: tuning sizes workers for 4 cores" in text
    assert text.rstrip().endswith("9 ok, 1 warn, 1 fail")


@pytest.mark.slow
def test_doctor_end_to_end_json(four_jpegs, capsys):
    """No fakes: the real checks and smoke tests on this machine."""
    code = main(["doctor", "--json", "--dataset", str(four_jpegs)])
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"status", "exit_code", "checks"}
    assert code == out["exit_code"] == doctor.exit_code([doctor.Check(c["name"], Status(c["status"]), c["value"], c["fix"]) for c in out["checks"]])
    names = [c["name"] for c in out["checks"]]
    assert names[:3] == ["python", "torch", "cuda"]
    assert {"gpus", "dali", "cpus", "shm", "memlock", "container", "dataset", "unreadable", "page-cache"} <= set(names)
    for c in out["checks"]:
        assert set(c) == {"name", "status", "value", "fix"} and c["status"] in ("ok", "warn", "fail")
        assert (c["fix"] is not None) == (c["status"] != "ok")
    by = {c["name"]: c for c in out["checks"]}
    assert by["dataset"]["value"].startswith("4 images, 2 classes, JPEG 4")
    assert by["smoke-torch"]["status"] == "ok", by["smoke-torch"]
    if shutil.which("nvidia-smi") is None:
        assert by["smoke-dali-gpu"]["value"] in ("skipped (no GPU)", "skipped (DALI not installed)")


def test_smoke_children_are_killed_when_a_check_raises(machine):
    procs = []
    fake = _fake_child("import time; time.sleep(60)")
    machine.setattr(doctor._smoke, "_start_smoke", lambda kind, root: procs.append(fake(kind, root)) or procs[-1])
    machine.setattr(doctor._checks, "check_cpus", lambda: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        doctor.run_checks(smoke=True)
    assert procs and all(p.returncode is not None for p in procs)


def test_a_torch_import_slowed_by_a_busy_machine_does_not_stop_the_run(machine, tiny_dataset):
    """The probe timing out says the machine is busy, not that torch is broken: a warning, and the run goes on."""
    machine.setattr(
        doctor._probes, "torch_probe", lambda: {"error": f"importing torch and initialising CUDA hung for {doctor.PROBE_TIMEOUT_S:g} s", "hung": True}
    )
    check = doctor.check_torch(doctor._probes.torch_probe())
    assert check.status is doctor.Status.WARN and "hung" in check.value
    doctor.preflight(tiny_dataset, "cpu")  # no UserError
    machine.setattr(doctor._probes, "torch_probe", lambda: {"error": "ModuleNotFoundError: No module named 'torch'"})
    with pytest.raises(UserError, match="torch check failed: cannot import torch"):
        doctor.preflight(tiny_dataset, "cpu")


def test_a_torchvision_built_for_another_torch_is_named_as_such():
    """torchvision installed but failing to import: "pip install torchvision" would only say it is already there."""
    probe = {
        "torch": "2.13.0+cpu",
        "torchvision": None,
        "torchvision_error": "RuntimeError: operator torchvision::nms does not exist",
        "cuda": None,
        "available": False,
        "devices": 0,
    }
    check = doctor.check_torch(probe)
    assert check.status is doctor.Status.FAIL and "operator torchvision::nms does not exist" in check.value
    assert "built for torch 2.13.0+cpu" in check.fix and check.fix != "pip install torchvision (the version that matches torch)"
    assert doctor.check_torch({**probe, "torchvision_error": None}).fix.startswith("pip install torchvision")


@pytest.mark.slow
def test_pils_large_image_warning_does_not_reach_the_terminal(tiny_dataset, tmp_path, capsys):
    """A 144 M pixel PNG (under the scan's limit, over PIL's 89 M) printed PIL's DecompressionBombWarning, file and line."""
    import shutil

    from PIL import Image

    from autotune.cli import main

    data = tmp_path / "data"
    shutil.copytree(tiny_dataset, data)
    Image.new("1", (12000, 12000)).save(next(p for p in data.iterdir() if p.is_dir()) / "big.png")
    main(["doctor", "--dataset", str(data), "--no-smoke"])
    err = capsys.readouterr().err
    assert "DecompressionBomb" not in err and "exceeds limit" not in err
