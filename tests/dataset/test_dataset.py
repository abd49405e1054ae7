"""The dataset scan: torchvision ImageFolder's rules, and what it skips instead of hanging or failing later."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from autotune.dataset.scan import scan
from autotune.errors import DatasetError
from tests.helpers import fs_name, png_header


def _png_bytes(size: tuple[int, int] = (6, 5), mode: str = "RGB") -> bytes:
    b = io.BytesIO()
    Image.new(mode, size, 90).save(b, "PNG")
    return b.getvalue()


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    """A tree that exercises ImageFolder's rules: nesting, sort order, case, links, hidden and odd names."""
    root = tmp_path / "train"
    img = _png_bytes()
    layout = [
        "cat/1.jpg", "cat/2.JPG", "cat/notes.txt", "cat/x/y/deep.png", "cat/x-z/side.jpeg", "cat/x/a.bmp",
        "dog/b.PNG", "dog/a.webp.png", "dog/README", "dog/.hidden.jpg",
        ".cache/c.jpg", "Zebra/z.tif", "elk/sub/e.ppm",
    ]
    for rel in layout:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(img)
    (root / "empty_file_not_a_class").write_bytes(b"x")
    ext = tmp_path / "elsewhere"
    ext.mkdir()
    (ext / "linked.jpg").write_bytes(img)
    os.symlink(ext, root / "dog" / "linkdir")  # a symlinked folder is followed
    os.symlink(root / "cat" / "1.jpg", root / "elk" / "linked_file.jpg")
    Path(fs_name(root / "elk", b"caf\xe9.png")).write_bytes(img)  # not UTF-8
    return root


def test_classes_and_samples_equal_torchvision_imagefolder(tree: Path) -> None:
    from torchvision.datasets import ImageFolder

    ref = ImageFolder(str(tree))
    ds = scan(tree)
    assert dict(zip(ds.classes, range(len(ds.classes)), strict=False)) == ref.class_to_idx
    assert list(zip(ds.files, ds.labels, strict=False)) == [(str(p), y) for p, y in ref.samples]
    assert ds.skipped == ()


def test_scan_order_is_sorted_walk_not_depth_first(tree: Path) -> None:
    cat = [os.path.relpath(f, tree) for f, y in zip(scan(tree).files, scan(tree).labels, strict=False) if y == scan(tree).classes.index("cat")]
    # sorted(os.walk()) puts "cat/x-z" ('-' < '/') before "cat/x/y"
    assert cat == ["cat/1.jpg", "cat/2.JPG", "cat/x/a.bmp", "cat/x-z/side.jpeg", "cat/x/y/deep.png"]


def test_symlink_loop_does_not_hang(tmp_path: Path) -> None:
    root = tmp_path / "train"
    (root / "a" / "sub").mkdir(parents=True)
    (root / "a" / "sub" / "1.png").write_bytes(_png_bytes())
    os.symlink("..", root / "a" / "sub" / "up")  # a/sub/up -> a: a loop
    os.symlink(root, root / "a" / "root")  # back to the dataset root
    code = f"from autotune.dataset import scan; d = scan({str(root)!r}); print(len(d.files))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # a/sub/1.png once; a/root/a/... leads back into the walk once before the loop is cut at a/root/a/root
    assert int(out.stdout) >= 1
    assert "symlink loop" in out.stderr


def test_many_loops_are_a_few_lines_and_a_count(tmp_path: Path, caplog) -> None:
    """30 links back up each printed their own warning (and build_loader("/") a line per /proc folder): folders
    skipped are counted with the unusable files."""
    import logging

    root = tmp_path / "train"
    (root / "a").mkdir(parents=True)
    (root / "a" / "1.png").write_bytes(_png_bytes())
    for i in range(30):
        os.symlink("..", root / "a" / f"up{i}")
    with caplog.at_level(logging.INFO, logger="autotune"):
        d = scan(root)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(d.files) == 1 and d.skipped == ()  # told, but not unusable files: doctor warned of 30 "unreadable" images
    assert len(warned) == 6 and all("symlink loop" in w for w in warned[:5]), warned
    assert warned[5].startswith("skipping 25 more unusable files or folders under "), warned
    assert sum("symlink loop" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO) == 25  # each, at --verbose


def test_a_class_folder_link_that_loops_is_skipped_and_a_dataset_link_that_loops_is_named(tmp_path: Path, caplog) -> None:
    root = tmp_path / "ds"
    (root / "a").mkdir(parents=True)
    (root / "a" / "1.png").write_bytes(_png_bytes())
    os.symlink("c9", root / "c9")  # a link to itself among the class folders
    ds = scan(root)
    assert ds.classes == ("a",) and len(ds) == 1
    assert any("c9" in r.getMessage() and "symbolic links" in r.getMessage() for r in caplog.records)
    only = tmp_path / "only"
    only.mkdir()
    os.symlink("c9", only / "c9")
    caplog.clear()
    with pytest.raises(DatasetError, match="has no class sub-folder but links that loop or lead nowhere"):
        scan(only)  # it said "has images but no class sub-folders", and named no link
    assert any("c9" in r.getMessage() and "symbolic links" in r.getMessage() for r in caplog.records)
    os.symlink("loop", tmp_path / "loop")
    with pytest.raises(DatasetError, match="symbolic link that leads nowhere"):
        scan(tmp_path / "loop")


def test_zero_byte_fifo_garbage_gif_and_bomb_are_skipped_with_their_paths(tmp_path: Path) -> None:
    root = tmp_path / "train"
    (root / "a").mkdir(parents=True)
    (root / "a" / "good.png").write_bytes(_png_bytes())
    (root / "a" / "zero.jpg").write_bytes(b"")
    (root / "a" / "garbage.jpg").write_bytes(b"this is not an image at all" * 10)
    gif = io.BytesIO()
    Image.new("P", (4, 4)).save(gif, "GIF")
    (root / "a" / "gif_named.jpg").write_bytes(gif.getvalue())
    (root / "a" / "bomb.png").write_bytes(png_header(60000, 60000))
    os.mkfifo(root / "a" / "pipe.jpg")
    ds = scan(root)
    assert [os.path.basename(f) for f in ds.files] == ["good.png"]
    why = {os.path.basename(f): reason for f, reason in ds.skipped}
    assert set(why) == {"zero.jpg", "garbage.jpg", "gif_named.jpg", "bomb.png", "pipe.jpg"}
    assert why["zero.jpg"] == "zero-byte file"
    assert why["pipe.jpg"] == "not a regular file"
    assert "not a readable image" in why["garbage.jpg"]
    assert "GIF" in why["gif_named.jpg"]
    assert "3,600,000,000 pixels" in why["bomb.png"] and "decompression bomb" in why["bomb.png"]
    assert all(os.path.isabs(f) for f, _ in ds.skipped)


def test_header_check_can_be_turned_off(tmp_path: Path) -> None:
    root = tmp_path / "train"
    (root / "a").mkdir(parents=True)
    (root / "a" / "garbage.jpg").write_bytes(b"junk" * 10)
    (root / "a" / "zero.jpg").write_bytes(b"")
    ds = scan(root, check_headers=False)
    assert [os.path.basename(f) for f in ds.files] == ["garbage.jpg"]
    assert [os.path.basename(f) for f, _ in ds.skipped] == ["zero.jpg"]


def test_only_unusable_files_is_a_one_line_error(tmp_path: Path) -> None:
    root = tmp_path / "train"
    (root / "a").mkdir(parents=True)
    (root / "a" / "zero.jpg").write_bytes(b"")
    with pytest.raises(DatasetError, match="no readable images") as info:
        scan(root)
    assert "\n" not in str(info.value)


def test_empty_class_keeps_its_label_index(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "train"
    for c in ("a", "b", "c"):
        (root / c).mkdir(parents=True)
    (root / "a" / "1.png").write_bytes(_png_bytes())
    (root / "b" / "zero.png").write_bytes(b"")
    (root / "c" / "1.png").write_bytes(_png_bytes())
    ds = scan(root)
    assert ds.classes == ("a", "b", "c") and ds.labels == (0, 2)
    assert "no usable image: b" in caplog.text


def test_non_utf8_names_scan_sign_and_serialise(tree: Path, tmp_path: Path) -> None:
    from autotune.config.files import load_config, save_config
    from autotune.config.schema import Config, LoaderConfig

    ds = scan(tree)
    odd = [f for f in ds.files if "\udce9" in f]
    assert len(odd) == 1 and os.path.exists(odd[0])
    assert len(ds.signature()) == 16
    # a dataset whose own folder name is not UTF-8: its path must survive the YAML round trip
    weird_root = Path(fs_name(tmp_path, b"d\xffata"))
    os.rename(tree, weird_root)
    ds2 = scan(weird_root)
    cfg = Config(loader=LoaderConfig("torch", 4), dataset=ds2.summary())
    out = tmp_path / "autotune.yaml"
    save_config(cfg, out)
    out.read_text(encoding="utf-8")  # valid UTF-8 text
    back = load_config(out)
    assert back.dataset["path"].endswith("/d\\xffata")  # shown with an escape, printable anywhere
    assert back.dataset["path"] == os.fsencode(ds2.root).decode("utf-8", "backslashreplace")


def test_the_fast_header_reader_agrees_with_pil_and_leaves_the_odd_ones_to_it(tmp_path: Path) -> None:

    from PIL import Image

    from autotune.dataset.imaging import BadImageError, _fast_header, read_header

    def jpeg(**kw) -> bytes:
        buf = io.BytesIO()
        Image.new("RGB", (37, 23), (200, 10, 10)).save(buf, "JPEG", **kw)
        return buf.getvalue()

    exif = Image.Exif()
    exif[0x010F] = "camera" * 500  # a 3 KB APP1 segment before the frame header
    cases = {"plain.jpg": jpeg(), "progressive.jpg": jpeg(progressive=True), "exif.jpg": jpeg(exif=exif.tobytes())}
    png = io.BytesIO()
    Image.new("L", (41, 19)).save(png, "PNG")
    cases["gray.png"] = png.getvalue()
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        with open(tmp_path / name, "rb") as f:
            fast = _fast_header(f)
        with Image.open(tmp_path / name) as im:
            assert fast == (im.format, im.width, im.height), name  # read without PIL, the same answer
        assert read_header(str(tmp_path / name)) == fast
    # a JPEG cut inside its segments: the fast reader gives up and PIL's error names the problem
    (tmp_path / "cut.jpg").write_bytes(cases["exif.jpg"][:200])
    with open(tmp_path / "cut.jpg", "rb") as f:
        assert _fast_header(f) is None
    with pytest.raises(BadImageError):
        read_header(str(tmp_path / "cut.jpg"))


def test_the_scan_signs_as_it_goes_and_a_derived_dataset_signs_its_own_files(tree: Path, monkeypatch) -> None:
    """No second pass over the files for the signature (a million stat calls on ImageNet); the same value as one."""
    import dataclasses
    import hashlib
    import importlib

    scan_module = importlib.import_module("autotune.dataset.scan")

    ds = scan(tree)
    h = hashlib.sha1()
    for f in ds.files:  # the signature's definition: relative path, then size, file by file
        h.update(os.path.relpath(f, ds.root).encode("utf-8", "surrogateescape"))
        h.update(str(os.stat(f).st_size).encode())

    calls = []
    real_stat = scan_module.os.stat
    monkeypatch.setattr(scan_module.os, "stat", lambda *a, **kw: calls.append(a) or real_stat(*a, **kw))
    sig = ds.signature()
    monkeypatch.undo()
    assert sig == h.hexdigest()[:16] and calls == []  # computed by the scan, not by a second pass
    fewer = dataclasses.replace(ds, files=ds.files[1:], labels=ds.labels[1:])
    assert fewer.signature() != ds.signature()  # derived with other files: signed again, not the scan's value
    assert dataclasses.replace(fewer).signature() == fewer.signature()


@pytest.mark.parametrize("workers", [1, 2])
def test_making_a_set_says_how_far_it_got(tmp_path: Path, capsys, workers: int) -> None:
    """`autotune run --demo` printed nothing for the minute its 2,000 images took on two cores."""
    from autotune.dataset.synth import quarter_lines, synthesize

    calls: list[tuple[int, int]] = []
    synthesize(tmp_path / "a", images=12, classes=2, min_side=16, max_side=24, workers=workers, progress=lambda d, t: calls.append((d, t)))
    assert calls == [(k, 12) for k in range(1, 13)]
    calls.clear()
    synthesize(tmp_path / "a", images=16, classes=2, min_side=16, max_side=24, workers=workers, progress=lambda d, t: calls.append((d, t)))
    assert calls == [(k, 4) for k in range(1, 5)]  # only the images missing
    for k in range(1, 9):
        quarter_lines("demo images")(k, 8)
    assert capsys.readouterr().err.splitlines() == [f"  {k}/8 demo images" for k in (2, 4, 6, 8)]
