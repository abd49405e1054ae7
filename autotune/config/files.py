"""Reading and writing config YAML: safe loading with one-line errors, atomic writes, :func:`load_config`."""

from __future__ import annotations

import errno
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import yaml

from autotune.config.schema import Config, whole_number
from autotune.dataset.paths import printable
from autotune.dataset.scan import IMG_EXTENSIONS
from autotune.errors import ConfigError, expect


def dump_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=110, allow_unicode=True)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename.

    A reader sees the old file or the new one, never half of one. The file gets the user's umask.
    """
    path = Path(path)
    if path.is_symlink():  # write the file the link points to; the link stays a link
        path = Path(os.path.realpath(path))
    if path.exists() and not path.is_file() and not path.is_dir():
        raise OSError(errno.EINVAL, f"{str(path)!r} is not a regular file (a device, a pipe or a socket)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_problem(path: str | os.PathLike[str]) -> str | None:
    """Why :func:`atomic_write_text` could not write ``path``, found before any long work; None when it can.

    Found: ``path`` ends in an image's extension (a scan would read it as one), is a folder, a folder on the way
    is a file, the folder (or, when it does not exist yet, the nearest folder above it) cannot be written:
    read-only, no permission. A full disk shows only when writing.
    The answer reads after the path: ``f"{path!r} {problem}"``.
    """
    text = os.fspath(path)
    if isinstance(text, str) and text.endswith(("/", os.sep)):  # Path() drops the slash: a folder meant would become a file
        return f"names a folder (it ends in '/'); pass a file name such as {text.rstrip('/' + os.sep) or '.'}/autotune.yaml"
    p = Path(path).absolute()
    if p.suffix.lower() in IMG_EXTENSIONS:  # written into an image folder, the next scan reads it as a broken image
        return f"ends in {p.suffix}, an image's extension, so a scan of its folder would read it as a broken image; pass a file name with another extension"
    if p.is_symlink():
        p = Path(os.path.realpath(p))  # the link's target is what gets written
    if p.is_dir():
        return "is a folder; pass a file name such as autotune.yaml"
    if p.exists() and not p.is_file():
        return "is not a regular file (a device, a pipe or a socket), which a config would replace; pass a file name such as autotune.yaml"
    folder = _nearest_folder(p.parent)
    if not folder.is_dir():
        return f"is under {str(folder)!r}, which is a file, not a folder; pass a path in a folder"
    why = _unwritable(folder, f".{p.name}.")  # what the atomic write does first: a temporary file next to the destination
    if why is not None:
        return f"cannot be written: folder {str(folder)!r} is not writable ({why}); pass a path in a folder you can write"
    return None


def _nearest_folder(p: Path) -> Path:
    """``p``, or the nearest path above it that exists (a file, when one is in the way)."""
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _unwritable(folder: Path, prefix: str) -> str | None:
    """Why no file can be made in ``folder`` (tried with a temporary file, removed), or None."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".probe", dir=folder)
    except OSError as e:  # /proc answers "no such file" for a folder that is there
        return "it takes no new files" if e.errno == errno.ENOENT else (e.strerror or str(e))
    os.close(fd)
    os.unlink(tmp)
    return None


def folder_problem(path: str | os.PathLike[str]) -> str | None:
    """Why files could not be made in the folder ``path`` (made first when it does not exist), found before any
    long work and without making it; None when they can. Reads after the path, as :func:`write_problem`."""
    p = Path(path).absolute()
    if p.exists() and not p.is_dir():
        return "is a file, not a folder (Not a directory); pass a folder"
    up = _nearest_folder(p)
    if not up.is_dir():
        return f"is under {str(up)!r}, which is a file, not a folder (Not a directory); pass a folder"
    why = _unwritable(up, ".autotune.")
    if why is not None:
        return f"cannot be {'written' if up == p else 'made'}: folder {str(up)!r} is not writable ({why}); pass a folder you can write"
    return None


def foreign_problem(path: str | os.PathLike[str]) -> str | None:
    """Why a config must not replace the file at ``path``: it holds something else (a training script's YAML, a
    database). None for no file, an empty one, or a config of any schema. Reads after the path, as :func:`write_problem`."""
    p = Path(path)
    if not p.is_file() or p.stat().st_size == 0:
        return None
    fix = "so it is not replaced; pass another file name such as autotune.yaml, or remove it first"
    try:
        data = read_yaml(p, "file")
    except ConfigError:
        return f"exists and cannot be read as YAML, {fix}"
    if isinstance(data, dict) and "schema" in data and "loader" in data:  # every autotune YAML has both
        return None
    return f"exists and is not an autotune config (no schema and loader sections), {fix}"


def save_config(cfg: Config, path: str | os.PathLike[str]) -> None:
    """Write ``cfg`` as YAML, atomically."""
    atomic_write_text(
        path, "# autotune loader config: autotune.load_config(path); each key is described in docs/usage.md, section 'The YAML'\n" + dump_yaml(cfg.to_dict())
    )


def side_path(out: str | os.PathLike[str]) -> Path:
    """``<stem>.interrupted.yaml`` beside ``out``: where an interrupted run puts its best so far (:func:`interrupted_path`)."""
    out = Path(out)
    return out.with_name(f"{out.stem}.interrupted.yaml")


def holds_study(path: str | os.PathLike[str], study: dict[str, Any]) -> bool:
    """Whether the config at ``path`` was written for ``study`` (a YAML's ``study`` section: the same name in the
    same storage); False for a missing file or one that is not a config."""
    try:
        held = read_yaml(path, "config").get("study") or {}
    except (ConfigError, OSError, AttributeError):
        return False
    return isinstance(held, dict) and (held.get("name"), held.get("storage")) == (study.get("name"), study.get("storage"))


def interrupted_path(out: str | os.PathLike[str], study: dict[str, Any]) -> Path:
    """Where an interrupted run writes its best config so far: ``out``, unless ``out`` holds what was written before
    and not for this study (``study``: its YAML section, name and storage); then :func:`side_path`, so that a Ctrl-C
    seconds into a second run does not replace a finished run's config with one trial's."""
    out = Path(out)
    if not out.exists() or holds_study(out, study):  # nothing there, or this study's own YAML (--resume)
        return out
    return side_path(out)


class _AliasFound(yaml.YAMLError):
    def __init__(self, anchor: str, line: int) -> None:
        super().__init__(anchor)
        self.anchor, self.line = anchor, line


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: Any, line: int, first: int) -> None:
        super().__init__(str(key))
        self.key, self.line, self.first = key, line, first


class _PlainLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` without aliases: a few lines of ``*alias`` can expand to gigabytes (a "billion
    laughs" file), and autotune never writes an alias, so a file that holds one is refused. A key given twice in
    one mapping is refused too: PyYAML keeps the last silently, so a space with ``batch_size`` twice would tune
    a range the user did not read as the one in force."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":  # `<<:` merges
                    key = self.construct_object(key_node, deep=True)
                    try:
                        first = seen.get(key)
                    except TypeError:  # an unhashable key: PyYAML's own error follows
                        continue
                    if first is not None:
                        raise _DuplicateKey(key, key_node.start_mark.line + 1, first)
                    seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _AliasFound(event.anchor, event.start_mark.line + 1)
        return super().compose_node(parent, index)


def _plain_load(text: str) -> Any:
    loader = _PlainLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


#: the largest YAML read: a config or a space is a few KiB; a search space with long lists stays far below this
MAX_YAML_BYTES = 4 * 2**20


def read_yaml(path: str | os.PathLike[str], what: str = "file") -> Any:
    """Safe-load a YAML file without aliases, or raise a one-line error."""
    if os.fspath(path) in ("", b""):  # Path("") is the working folder: "'.' is a folder" named the wrong problem
        raise ConfigError(f"the {what} path is empty; pass a YAML file's path")
    try:
        return _read_yaml(Path(path), what)
    except OSError as e:  # another user's file (mode 600), a folder that cannot be opened, an I/O error
        if e.errno == errno.ENAMETOOLONG:
            raise ConfigError(
                f"{what} {str(path)[:80]!r}{'...' if len(str(path)) > 80 else ''} is too long a path for this system ({e.strerror}); pass a shorter one"
            ) from None
        fix = "check its permissions and its folder's" if e.errno in (errno.EACCES, errno.EPERM) else "check the file and the disk"
        raise ConfigError(f"{what} {str(path)!r} cannot be read ({e.strerror or e}); {fix}") from None


def _read_yaml(p: Path, what: str) -> Any:
    if not p.exists():
        where = "" if p.is_absolute() else f" (looked for from {printable(os.getcwd())})"
        fix = "check the path, or write it with 'autotune run --dataset DIR --out FILE'" if what == "config" else "check the path"
        raise ConfigError(f"{what} {str(p)!r} does not exist{where}; {fix}")
    if p.is_dir():
        raise ConfigError(f"{what} {str(p)!r} is a folder; pass a YAML file")
    if not p.is_file():  # a pipe would block the read for ever, a device would never end
        raise ConfigError(f"{what} {str(p)!r} is not a regular file (a pipe, a device or a socket); pass a YAML file")
    if p.stat().st_size > MAX_YAML_BYTES:
        raise ConfigError(f"{what} {str(p)!r} is {p.stat().st_size:,} bytes, far more than any autotune file; pass the right YAML file")
    try:
        return _plain_load(p.read_text(encoding="utf-8"))
    except (RecursionError, ValueError) as e:  # nesting thousands deep; an integer of thousands of digits
        raise ConfigError(
            f"{what} {str(p)!r} cannot be read as an autotune file "
            f"({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else 'too deeply nested'}); pass an autotune YAML"
        ) from None
    except _DuplicateKey as e:
        where = f"on line {e.line}" if e.first == e.line else f"lines {e.first} and {e.line}"
        raise ConfigError(f"{what} {str(p)!r} gives the key {e.key!r} twice ({where}); keep one of them") from None
    except _AliasFound as e:
        raise ConfigError(f"{what} {str(p)!r} uses a YAML alias (*{e.anchor}) at line {e.line}; autotune files hold no aliases: write the value out") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = (str(getattr(e, "problem", None) or e).splitlines() or ["unknown"])[0]  # a reader's error runs on with "in <unicode string>"
        raise ConfigError(f"{what} {str(p)!r} is not valid YAML{at}: {problem}; fix the syntax") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {str(p)!r} is not UTF-8 text; pass a YAML file") from None


def load_config(path: str | os.PathLike[str] = "autotune.yaml", *, strict: bool = False, world_size: int | None = None) -> Config:
    """Read an ``autotune.yaml``.

    Args:
        path: the YAML written by ``autotune run``.
        strict: raise :class:`~autotune.errors.StaleConfigError` instead of warning when this machine's
            fingerprint differs from the one the config was tuned on in a way that matters.
        world_size: the number of ranks that will each run this loader; warns if it differs from the
            number the config was tuned for.

    Returns:
        The typed :class:`Config`.
    """
    expect(path, "path", (str, os.PathLike), "the YAML's path, such as 'autotune.yaml'")
    if strict not in (True, False):  # strict="no" (from an environment variable) was read as True
        raise ConfigError(f"strict must be True or False, but got {type(strict).__name__} {strict!r:.40}")
    if world_size is not None:
        world_size = whole_number(world_size, "world_size", "the ranks per node")
    cfg = Config.from_dict(read_yaml(path, "config"), path=str(path))
    from autotune.config import fingerprint

    diffs = [d for d in fingerprint.compare(cfg) if d.matters]
    if diffs:
        redo = cfg.retune_command(path)
        if all(d.was == fingerprint.NOT_RECORDED for d in diffs):  # written by hand, or its hardware section removed
            msg = f"{path} records no machine it was tuned on (no hardware section), so it cannot be shown to fit this one; tune it here with '{redo}'"
        else:
            msg = f"{path} does not fit this machine: " + "; ".join(str(d) for d in diffs) + f"; re-tune with '{redo}'"
        if strict:
            from autotune.errors import StaleConfigError

            raise StaleConfigError(msg)
        warnings.warn(msg, stacklevel=2)
    tuned_ranks = cfg.result.get("ranks")
    if world_size is not None and tuned_ranks is not None and int(tuned_ranks) != int(world_size):
        warnings.warn(f"{path} was tuned for {tuned_ranks} rank(s) per node but world size is {world_size}; re-tune with --gpus {world_size}", stacklevel=2)
    return cfg
