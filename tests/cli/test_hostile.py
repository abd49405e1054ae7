"""Hostile and messy inputs: secrets stay masked, names stay in their folders, odd data does not break a study."""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import stat
import struct
import time
import tracemalloc
from pathlib import Path

import numpy as np
import optuna
import pytest
import yaml
from PIL import Image

from autotune._imports import is_available
from autotune.config.files import atomic_write_text, load_config, read_yaml
from autotune.dataset.imaging import MAX_PIXELS, BadImageError, open_rgb, read_header
from autotune.dataset.paths import child_path, safe_name
from autotune.dataset.scan import scan
from autotune.errors import ConfigError, SpaceError, UserError
from autotune.study.storage import MaskSecrets, mask_url, open_storage
from tests.helpers import ROOT, fs_name, png_header

SECRET = "hunter2"


# -- secrets ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url, shown",
    [
        ("postgresql://user:hunter2@host/db", "postgresql://user:***@host/db"),
        ("postgresql+psycopg2://user:hunter2@db.example.com:5432/optuna", "postgresql+psycopg2://user:***@db.example.com:5432/optuna"),
        ("postgresql://user:hun@ter2@host/db", "postgresql://user:***@host/db"),  # '@' inside the password
        ("mysql://u:hunter2@h/db?password=hunter2&charset=utf8", "mysql://u:***@h/db?password=***&charset=utf8"),
        ("postgresql://u@h/db?sslpassword=hunter2&token=hunter2", "postgresql://u@h/db?sslpassword=***&token=***"),
        ("redis://:hunter2@cache:6379/0", "redis://:***@cache:6379/0"),
        ("https://h/x?api_key=hunter2;sig=hunter2", "https://h/x?api_key=***;sig=***"),
        ("sqlite:///autotune.db", "sqlite:///autotune.db"),
        ("journal:/tmp/study.log", "journal:/tmp/study.log"),
        ("cannot parse 'postgresql//u:hunter2@h/db' here", "cannot parse 'postgresql//u:***@h/db' here"),
    ],
)
def test_mask_url(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_log_filter_masks_message_args_and_traceback() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(MaskSecrets())
    log = logging.getLogger("autotune.test_hostile")
    log.addHandler(handler)
    try:
        log.warning("storage %s is slow", "postgresql://u:hunter2@h/db")
        try:
            raise RuntimeError("connect to postgresql://u:hunter2@h/db?token=hunter2 failed")
        except RuntimeError:
            log.exception("failed")
    finally:
        log.removeHandler(handler)
    text = stream.getvalue()
    assert SECRET not in text
    assert "postgresql://u:***@h/db" in text and "token=***" in text


def test_storage_errors_do_not_show_the_password() -> None:
    for url in ("postgresql://user:hunter2@127.0.0.1:1/db", "nosuchdb://user:hunter2@host/db"):
        with pytest.raises(UserError) as info:
            open_storage(url)
        assert SECRET not in str(info.value) and "user:***@" in str(info.value)


#: Storage URLs that SQLAlchemy cannot parse or that hide where their password ends: a port that is no number, a
#: password with a space, a quote or '@', several hosts
ODD_URLS = [
    f"postgresql://user:{SECRET}@127.0.0.1:abc/db",
    f"postgresql://user:{SECRET} x@127.0.0.1:abc/db",
    f"postgresql://user:{SECRET}'x@127.0.0.1:abc/db",
    f'postgresql://user:{SECRET}"x@127.0.0.1:abc/db',
    f"postgresql://user:{SECRET}@x@127.0.0.1:abc/db",
    f"postgresql://user:{SECRET}@h1:5432,h2:5433/db",
    f"postgresql://user:x {SECRET}@h1:5432,h2/db",
]


@pytest.mark.parametrize("url", ODD_URLS)
@pytest.mark.parametrize("command", [["studies"], ["show", "--study", "s"], ["report"]])
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_malformed_storage_url_is_named_without_its_password(tmp_path, monkeypatch, capsys, url, command, as_json):
    """'... is not a storage URL; pass sqlite:///postgresql://user:secret@...' repeated the password, on stderr and in
    the JSON error; docs/messy-data.md promises *** wherever a storage URL is printed."""
    from autotune.cli import main

    monkeypatch.chdir(tmp_path)
    assert main([*command, "--storage", url, *(["--json"] if as_json else [])]) == 2
    out, err = capsys.readouterr()
    assert SECRET not in out + err and "user:***@" in err and err.count("\n") == 1
    assert "is not a valid storage URL" in err and "pass sqlite:///postgresql:" not in err  # a server's URL is no file name
    if as_json:
        assert SECRET not in out and json.loads(out)["exit_code"] == 2


@pytest.mark.parametrize("url", ODD_URLS)
def test_a_storage_url_in_an_argument_error_is_masked(tmp_path, monkeypatch, capsys, url):
    """argparse's errors repeat the words they did not take: the option before the command, a stray word."""
    from autotune.cli import main

    monkeypatch.chdir(tmp_path)
    for argv in (["--storage", url, "studies"], ["studies", url], ["studies", "--json", f"--storage={url}", url]):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert SECRET not in out + err and "user:***@" in err, argv


def test_run_names_a_malformed_storage_url_without_its_password(tiny_dataset, tmp_path, monkeypatch, capsys):
    from autotune.cli import main

    monkeypatch.chdir(tmp_path)
    for url in ODD_URLS:
        assert main(["run", "--dataset", str(tiny_dataset), "--storage", url, "--json", "--n-trials", "1"]) == 2
        out, err = capsys.readouterr()
        assert SECRET not in out + err and "user:***@" in err, url


@pytest.mark.parametrize(
    "text, shown",
    [
        (f"postgresql://user:{SECRET}@127.0.0.1:abc/db is not; pass sqlite:///postgresql://user:{SECRET}@127.0.0.1:abc/db",
         "postgresql://user:***@127.0.0.1:abc/db is not; pass sqlite:///postgresql://user:***@127.0.0.1:abc/db"),
        (f"cannot open postgresql://user:{SECRET} x@h/db: refused", "cannot open postgresql://user:***@h/db: refused"),
        (f"cannot open 'postgresql://user:{SECRET}\\'x@h/db': refused", "cannot open 'postgresql://user:***@h/db': refused"),
        (f'{{"error": "postgresql://user:{SECRET}\\"x@h/db"}}', '{"error": "postgresql://user:***@h/db"}'),
        (f"postgresql://user:{SECRET}@h1:5432,h2:5433/db", "postgresql://user:***@h1:5432,h2:5433/db"),
        ("mysql://u:***@h/db: Access denied for user 'u'@'10.0.0.1'", "mysql://u:***@h/db: Access denied for user 'u'@'10.0.0.1'"),
        ("postgresql://host:5432/db is down; write to admin@example.com", "postgresql://host:5432/db is down; write to admin@example.com"),
    ],
)
def test_mask_url_finds_passwords_that_hold_odd_characters(text, shown):
    assert mask_url(text) == shown


# -- names --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["../../etc", "..", "/abs/path", "a/../../b", "..\\..\\win", "\x00nul", "caf\udce9", "sp ace", "-", "." * 300])
def test_safe_name_stays_in_its_folder(tmp_path: Path, name: str) -> None:
    s = safe_name(name)
    assert s and "/" not in s and "\\" not in s and ".." not in s and not s.startswith((".", "-"))
    assert len(s) <= 120
    s.encode("ascii")
    p = child_path(tmp_path, name)
    assert p.parent == tmp_path and p.resolve().parent == tmp_path.resolve()


def test_safe_name_keeps_plain_names_and_never_merges_two() -> None:
    assert safe_name("resnet-run_1.2") == "resnet-run_1.2"
    assert safe_name("a/b") != safe_name("a_b") and safe_name("a/b") != safe_name("a:b")
    assert safe_name("x" * 200) != safe_name("x" * 201)


def test_child_path_refuses_a_symlink_out(tmp_path: Path) -> None:
    (tmp_path / "reports").mkdir()
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", tmp_path / "reports" / "s1")
    with pytest.raises(UserError, match="leads outside"):
        child_path(tmp_path / "reports", "s1")


def test_report_folder_of_a_hostile_study_name_stays_under_reports(tmp_path: Path) -> None:
    report = pytest.importorskip("autotune.report")
    for name in ("../../escape", "/etc/cron.d/x", "a/../../../b"):
        d = report.report_dir(name, tmp_path / "reports")
        assert d.parent == tmp_path / "reports"


# -- config files -------------------------------------------------------------------------------------
def test_no_unsafe_yaml_loading_anywhere() -> None:
    for p in (ROOT / "autotune").rglob("*.py"):
        text = p.read_text(encoding="utf-8")
        for bad in ("yaml.load(", "yaml.unsafe_load", "yaml.full_load", "yaml.Loader", "yaml.UnsafeLoader", "yaml.FullLoader"):
            assert bad not in text, f"{p}: {bad}"


def test_yaml_python_tags_are_refused(tmp_path: Path) -> None:
    f = tmp_path / "evil.yaml"
    f.write_text("schema: 1\nloader: !!python/object/apply:os.system ['touch pwned']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        read_yaml(f)
    assert not Path("pwned").exists()


def _space(tmp_path: Path, text: str) -> str:
    p = tmp_path / "space.yaml"
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize(
    "text, key",
    [
        ("name: x\nparmas: {}\n", "'parmas'"),
        ("params:\n  batch_size: {choices: [8]}\n  num_wokers: {int: [0, 2]}\n", "params.num_wokers"),
        ("params:\n  batch_size: {choices: [8], lgo: true}\n", "params.batch_size.lgo"),
    ],
)
def test_unknown_keys_in_a_space_file_are_an_error_naming_the_key(tmp_path: Path, text: str, key: str) -> None:
    from autotune.study.space import load_space

    with pytest.raises(SpaceError, match=key.replace(".", r"\.")):
        load_space(_space(tmp_path, text))


@pytest.mark.parametrize(
    "extra, key",
    [
        ({"colour": "blue"}, "'colour'"),
        ({"loader": {"backend": "torch", "batch_size": 8, "torch": {"num_worker": 2}}}, "loader.torch.num_worker"),
        ({"loader": {"backend": "torch", "batch_size": 8, "shuffle": True}}, "loader.shuffle"),
    ],
)
def test_unknown_keys_in_a_config_are_an_error_naming_the_key(tmp_path: Path, extra: dict, key: str) -> None:
    data = {"schema": 1, "loader": {"backend": "torch", "batch_size": 8}, **extra}
    f = tmp_path / "autotune.yaml"
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as info:
        load_config(f)
    assert "\n" not in str(info.value)


# -- files written --------------------------------------------------------------------------------------
@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_write_uses_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "sub" / "a.yaml", "x: 1\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "sub" / "a.yaml").stat().st_mode) == mode


def test_atomic_write_leaves_the_old_file_when_it_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "autotune.yaml"
    f.write_text("old: 1\n")

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write_text(f, "new: 2\n" * 1000)
    assert f.read_text() == "old: 1\n"
    assert os.listdir(tmp_path) == ["autotune.yaml"]  # no temporary file left behind


# -- images ---------------------------------------------------------------------------------------------
def _jpeg_claiming(width: int, height: int) -> bytes:
    """A tiny JPEG whose SOF marker declares ``width x height``."""
    b = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(b, "JPEG")
    data = bytearray(b.getvalue())
    i = data.find(b"\xff\xc0")
    struct.pack_into(">HH", data, i + 5, height, width)
    return bytes(data)


@pytest.mark.parametrize("name", ["gray.jpg", "cmyk.jpg", "png_named.jpg", "rgba.png", "palette.png", "gray.png"])
def test_odd_images_open_as_rgb(odd_images: Path, name: str) -> None:
    path = next(str(p) for p in odd_images.rglob(name))
    img = open_rgb(path)
    assert img.mode == "RGB" and img.size == (88, 72)


def test_png_named_jpg_is_detected_by_content(odd_images: Path) -> None:
    assert read_header(str(odd_images / "b" / "png_named.jpg"))[0] == "PNG"
    assert read_header(str(odd_images / "a" / "cmyk.jpg"))[0] == "JPEG"


@pytest.mark.parametrize(
    "make, name",
    [(lambda: png_header(60000, 60000), "bomb.png"), (lambda: _jpeg_claiming(60000, 60000), "bomb.jpg"), (lambda: png_header(20000, 10000), "big.png")],
)
def test_decompression_bombs_are_refused_without_allocating(tmp_path: Path, make, name: str) -> None:
    f = tmp_path / name
    f.write_bytes(make())
    assert f.stat().st_size < 1000
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        for fn in (open_rgb, read_header):
            with pytest.raises(BadImageError) as info:
                fn(str(f))
            msg = str(info.value)
            assert msg.startswith(f"{f}: ") and "decompression bomb" in msg and "\n" not in msg
            assert f"{MAX_PIXELS:,}" in msg
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20 and time.perf_counter() - t0 < 5


def test_truncated_and_garbage_images_are_bad_image_errors(tmp_path: Path) -> None:
    good = io.BytesIO()
    Image.new("RGB", (64, 64), (1, 2, 3)).save(good, "PNG")
    (tmp_path / "trunc.png").write_bytes(good.getvalue()[:60])
    (tmp_path / "junk.jpg").write_bytes(b"\x00" * 100)
    for name in ("trunc.png", "junk.jpg"):
        with pytest.raises(BadImageError, match=f"^{tmp_path / name}: "):
            open_rgb(str(tmp_path / name))


BACKENDS = ["torch", pytest.param("dali", marks=pytest.mark.skipif(not is_available("dali"), reason="DALI is not installed"))]


@pytest.mark.parametrize("backend", BACKENDS)
def test_odd_images_give_rgb_batches_with_scan_labels(odd_images: Path, backend: str) -> None:
    from autotune.config.schema import DaliOptions, LoaderConfig
    from autotune.loaders.backends import get_backend
    from autotune.loaders.presets import get_preset

    ds = scan(odd_images)
    assert len(ds) == 8 and ds.skipped == ()
    cfg = LoaderConfig("torch", 8) if backend == "torch" else LoaderConfig("dali", 8, dali=DaliOptions(device="cpu", num_threads=1))
    loader = get_backend(backend).build(ds, get_preset("imagenet-eval"), cfg, "cpu")
    try:
        images, labels = next(iter(loader))
    finally:
        loader.close()
    assert tuple(images.shape) == (8, 3, 224, 224)
    assert labels.tolist() == list(ds.labels)


# -- end to end ----------------------------------------------------------------------------------------
def _hostile_dataset(odd_images: Path, where: Path) -> Path:
    """The odd images plus a zero-byte file, garbage, a bomb, a symlink loop, under a folder not UTF-8 named."""
    root = Path(fs_name(where, b"d\xe9ta"))
    shutil.copytree(odd_images, root, symlinks=True)
    (root / "a" / "zero.jpg").write_bytes(b"")
    (root / "a" / "corrupt.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg" * 4)
    (root / "b" / "bomb.png").write_bytes(png_header(60000, 60000))
    (root / "b" / "bomb.jpg").write_bytes(_jpeg_claiming(50000, 50000))
    os.symlink("..", root / "b" / "loop")
    return root


class _RedirectedRDB:
    """Stands in for ``RDBStorage`` so a password-bearing PostgreSQL URL lands in a local SQLite file."""

    seen: list[str] = []

    def __new__(cls, url, *args, **kwargs):
        cls.seen.append(url)
        return _REAL_RDB("sqlite:///autotune.db", *args, **kwargs)


_REAL_RDB = optuna.storages.RDBStorage


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.slow
def test_study_completes_on_a_hostile_dataset_and_nothing_leaks(
    odd_images: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture, backend: str
) -> None:
    from autotune.cli import main

    data = _hostile_dataset(odd_images, workdir)
    (workdir / "run").mkdir()
    monkeypatch.chdir(workdir / "run")
    space = workdir / "space.yaml"
    knobs = "num_workers: {int: [0, cores], when: {backend: torch}}" if backend == "torch" else "dali_device: {choices: [cpu]}\n  num_threads: {int: [1, 2]}"
    space.write_text(f"name: hostile\nparams:\n  backend: {{choices: [{backend}]}}\n  batch_size: {{choices: [2]}}\n  {knobs}\n")
    monkeypatch.setattr(optuna.storages, "RDBStorage", _RedirectedRDB)
    url = f"postgresql://tuner:{SECRET}@db.internal:5432/optuna?sslpassword={SECRET}"
    old_umask = os.umask(0o027)
    try:
        rc = main(
            [
                "run",
                "--dataset",
                str(data),
                "--space",
                str(space),
                "--storage",
                url,
                "--study-name",
                "../../escape/../x",
                "--out",
                "../out/autotune.yaml",
                "--n-trials",
                "3",
                "--window",
                "0.2",
                "--windows",
                "2",
                "--warmup-batches",
                "1",
                "--confirm-top",
                "0",
                "--device",
                "cpu",
                "--json",
                "--seed",
                "0",
                *(["--no-baselines"] if backend == "dali" else []),
            ]
        )
    finally:
        os.umask(old_umask)
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert _RedirectedRDB.seen and SECRET in _RedirectedRDB.seen[-1]  # the real URL reached the storage

    # the study completed on the usable images, and every unusable file was named
    summary = json.loads(out)
    cfg = load_config(workdir / "out" / "autotune.yaml")
    assert cfg.dataset["samples"] == 8 and cfg.loader.backend.value == backend
    assert cfg.study["complete"] >= 1
    skipped_text = err + caplog.text
    for name in ("zero.jpg", "corrupt.jpg", "bomb.png", "bomb.jpg"):
        assert name in skipped_text
    assert "symlink loop" in caplog.text
    assert cfg.dataset["path"].endswith("/d\\xe9ta")
    # recorded escaped, and still found: 'check' compared no images ("... is not here") and --if-stale refused the file
    from autotune.config.staleness import dataset_not_compared, recorded_dataset

    assert dataset_not_compared(cfg) is None and recorded_dataset(workdir / "out" / "autotune.yaml") == str(data)

    # the password shows nowhere: --json, progress and messages, logs, YAML, database, report
    written = [workdir / "out" / "autotune.yaml", *(p for p in workdir.rglob("*") if p.is_file() and p.suffix in (".md", ".html", ".db"))]
    for text in (out, err, caplog.text, *(p.read_bytes().decode("utf-8", "replace") for p in written)):
        assert SECRET not in text
    assert summary["storage"] == "postgresql://tuner:***@db.internal:5432/optuna?sslpassword=***"
    assert cfg.study["storage"] == summary["storage"]

    # the study name stayed in its folder; files got the umask
    assert not (workdir / "escape").exists() and not (workdir.parent / "escape").exists() and not (workdir.parent / "x").exists()
    reports = workdir / "run" / "reports"
    if "report" in summary:
        (folder,) = list(reports.iterdir())
        assert Path(summary["report"]).parent.resolve() == folder.resolve()
        assert folder.name == safe_name("../../escape/../x")
        for p in folder.rglob("*"):
            assert stat.S_IMODE(p.stat().st_mode) & 0o007 == 0
    assert stat.S_IMODE((workdir / "out" / "autotune.yaml").stat().st_mode) == 0o640
    assert stat.S_IMODE((workdir / "run" / "autotune.db").stat().st_mode) == 0o640
    assert [p.name for p in (workdir / "out").iterdir()] == ["autotune.yaml"]  # no temporary file left


@pytest.mark.slow
def test_an_image_that_fails_to_decode_is_named_when_no_trial_completes(
    tmp_path: Path, workdir: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autotune import doctor
    from autotune.cli import main

    monkeypatch.setattr(doctor._checks, "DECODE_SAMPLE", 1)  # a large set: the preflight's decode sample misses the bad file, a trial finds it

    root = tmp_path / "data"
    (root / "a").mkdir(parents=True)
    import numpy as np

    img = io.BytesIO()
    Image.fromarray((np.random.default_rng(0).random((96, 96, 3)) * 255).astype(np.uint8)).save(img, "JPEG")
    data = img.getvalue()
    for i in range(7):
        (root / "a" / f"{i}.jpg").write_bytes(data)
    (root / "a" / "7_truncated.jpg").write_bytes(data[: len(data) // 2])  # a valid header, half the pixels
    rc = main(
        [
            "run",
            "--dataset",
            str(root),
            "--space",
            "torch",
            "--batch-size",
            "4",
            "--n-trials",
            "1",
            "--window",
            "0.2",
            "--windows",
            "2",
            "--confirm-top",
            "0",
            "--device",
            "cpu",
            "--pipeline",
            "imagenet-eval",
            "--no-report",
            "--quiet",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 1
    assert "7_truncated.jpg cannot be decoded: remove it from the dataset" in err
    assert len(err.strip().splitlines()) == 1


def test_a_study_name_that_is_not_utf8_is_one_line(tmp_path, monkeypatch, capsys):
    """SQLAlchemy's UnicodeEncodeError traceback (surrogates not allowed), and an empty report folder left behind."""
    from autotune.cli import main

    monkeypatch.chdir(tmp_path)
    bad = os.fsdecode(b"bad\xffname")
    assert main(["run", "--dataset", str(tmp_path), "--study-name", bad, "--budget", "15"]) == 2
    assert capsys.readouterr().err.strip() == "autotune: error: --study-name bad\\xffname is not UTF-8 text; pass a name of letters, digits, '-' and '_'"
    assert not (tmp_path / "reports").exists() and not (tmp_path / "autotune.db").exists()


def test_a_removed_working_folder_is_one_line(tmp_path):
    """os.path.realpath and os.getcwd raised FileNotFoundError tracebacks from run and show."""
    import subprocess
    import sys

    gone = tmp_path / "gone"
    gone.mkdir()
    script = f"import os, sys; os.chdir({str(gone)!r}); os.rmdir({str(gone)!r}); from autotune.cli import main; sys.exit(main(['show', 'x.yaml']))"
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert (
        p.returncode == 2
        and p.stderr.strip() == "autotune: error: the current folder no longer exists (removed while the shell was in it); cd to one that does"
    )


def test_a_yaml_that_cannot_be_read_is_one_line(tmp_path, monkeypatch, capsys):
    """Another user's file (mode 600), or an I/O error: a PermissionError traceback, and `check` exited 1 ("stale")."""
    from autotune.cli import main

    with pytest.raises(ConfigError, match=r"^config '/proc/self/mem' cannot be read \(Input/output error\); check the file and the disk$"):
        load_config("/proc/self/mem")  # a regular file whose read fails, even for root
    path = tmp_path / "a.yaml"
    path.write_text("schema: 1\n")
    real = Path.read_text

    def refused(self, *a, **k):
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", refused)
    for argv in (["check", str(path)], ["show", str(path)], ["run", "--dataset", str(tmp_path), "--space", str(path)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.endswith(f"{str(path)!r} cannot be read (Permission denied); check its permissions and its folder's") and "\n" not in err, err
    with pytest.raises(ConfigError, match=r"^the config path is empty; pass a YAML file's path$"):
        load_config("")  # it said "'.' is a folder"


def test_16_bit_float_and_exif_turned_images_open_as_dali_decodes_them(deep_images: Path, tmp_path: Path) -> None:
    """Mid-grey 16-bit and float images at mid-grey (convert("RGB") gave 255 and 0), the EXIF-turned JPEG upright."""
    gray16 = np.asarray(open_rgb(str(deep_images / "a" / "gray16.png")), dtype=np.float64)
    assert gray16.shape == (64, 96, 3) and abs(gray16.mean() - 127.5) < 1 and gray16[0, 0, 0] == 0 and gray16[-1, -1, 0] == 255
    Image.fromarray(np.full((8, 8), 0.5, dtype=np.float32)).save(tmp_path / "float.tif")
    assert np.asarray(open_rgb(str(tmp_path / "float.tif"))).mean() == 128  # DALI's CPU decoder rounds 127.5 up too
    assert open_rgb(str(deep_images / "b" / "exif6.jpg")).size == (108, 60)


def test_32_bit_integer_and_float_tiffs_are_left_out_by_the_scan_and_named(tmp_path: Path) -> None:
    """DALI's decoder failed on every batch holding a 32-bit integer TIFF ('Invalid sample_type'), without naming the
    file; its GPU decoder read a float TIFF as black ('FP32 conversion is not supported')."""
    for c in ("a", "b"):
        (tmp_path / c).mkdir()
        Image.new("RGB", (32, 32), (9, 9, 9)).save(tmp_path / c / "ok.jpg")
    Image.fromarray(np.full((32, 32), 70000, dtype=np.int32)).save(tmp_path / "a" / "deep.tif")
    Image.fromarray(np.full((32, 32), 0.5, dtype=np.float32)).save(tmp_path / "b" / "float.tif")
    ds = scan(tmp_path)
    assert len(ds) == 2
    assert sorted((os.path.basename(f), why) for f, why in ds.skipped) == [
        ("deep.tif", "a 32-bit integer TIFF, which DALI cannot decode; convert it to 8 or 16 bits per channel"),
        ("float.tif", "a floating-point TIFF, which DALI's GPU decoder reads as black; convert it to 8 or 16 bits per channel"),
    ]
