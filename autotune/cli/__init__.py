"""The command line: ``main(argv) -> int``; one module per command (``_run.py``, ``_show.py``, ...).

Each command module has ``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``.

Exit codes: 0 success; 1 a check found a difference or a warning (``check``, ``doctor``); 2 bad input or a
failed check (one line on stderr, no traceback); 130 interrupted (Ctrl-C); 143 terminated (SIGTERM); 129 hung up (SIGHUP).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import io
import os
import re
import sys
from collections.abc import Sequence

from autotune.errors import UserError, interrupt_detail, interrupt_exit_code, interrupt_said

COMMANDS = ("run", "synth", "show", "check", "doctor", "report", "studies")


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``autotune run: error: ... (see 'autotune run --help')``."""

    def error(self, message: str):
        see = "" if message.endswith("--help')") else f" (see '{self.prog} --help')"  # a message that names the help to read
        self.exit(2, f"{self.prog}: error: {message}{see}\n")


def build_parser() -> argparse.ArgumentParser:
    from autotune import __version__

    parser = _Parser(
        prog="autotune",
        description="Find the fastest data-loader configuration (torch DataLoader or NVIDIA DALI) for this machine.",
        epilog="examples:\n  autotune run --demo\n  autotune run --dataset /data/train\n  autotune show autotune.yaml\n"
        "  autotune check autotune.yaml\n  autotune doctor",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"autotune {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    parser.set_defaults(_commands={})  # name -> its parser, for errors in its words
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f"autotune.cli._{name}")
        except ModuleNotFoundError as e:
            if e.name == f"autotune.cli._{name}":
                continue
            raise
        p = sub.add_parser(
            mod.NAME,
            help=mod.HELP,
            description=getattr(mod, "DESCRIPTION", mod.HELP),
            epilog=getattr(mod, "EXAMPLES", None),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.add_argument("-v", "--verbose", action="store_true", help="log diagnostics (details of each step) to stderr")
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
        parser.get_default("_commands")[mod.NAME] = p
    return parser


def _unrecognized(parser: argparse.ArgumentParser, command: str | None, extra: list[str]) -> None:
    """Words no parser took: the error is the command's (``see 'autotune check --help'``), and an option of another
    command says whose it is (``--if-stale`` belongs to ``run``)."""
    commands: dict[str, argparse.ArgumentParser] = parser.get_default("_commands")
    own = commands.get(command or "")
    early = [w for w in extra if own is not None and w.startswith("-") and w.split("=", 1)[0] in own._option_string_actions]
    if early and own is not None:  # `autotune --json studies`: the command's own option, given before the command
        own.error(f"{' '.join(early)} {'goes' if len(early) == 1 else 'go'} after the command: autotune {command} {' '.join(early)} ...")
    owners = {}
    for word in extra:
        flag = word.split("=", 1)[0]
        if flag.startswith("--"):
            has = [name for name, p in commands.items() if name != command and flag in p._option_string_actions]
            if has:
                owners[flag] = has
    hint = "".join(f"; {flag} is an option of " + " and ".join(f"'autotune {n}'" for n in names) for flag, names in owners.items())
    helps = list(dict.fromkeys(n for names in owners.values() for n in names))
    if owners and all(w.split("=", 1)[0] in owners for w in extra if w.startswith("-")):  # each stray flag is another command's: read its help
        hint += " (see " + " or ".join(f"'autotune {n} --help'" for n in helps) + ")"
    (commands.get(command or "") or parser).error(f"unrecognized arguments: {' '.join(extra)}{hint}")


def _options_before_command(parser: argparse.ArgumentParser, words: list[str]) -> None:
    """``autotune --storage sqlite:///s.db studies``: a command's option, with its value, given before the command.
    argparse would take the value for the command; the error says where the option goes."""
    commands: dict[str, argparse.ArgumentParser] = parser.get_default("_commands")
    if not words or not words[0].startswith("-") or words[0] in ("-h", "--help", "--version"):
        return
    at = next((i for i, w in enumerate(words) if w in commands), None)
    if at is None:
        return
    own = commands[words[at]]
    early = words[:at]
    if early[0].split("=", 1)[0] in own._option_string_actions:
        one = sum(w.startswith("-") for w in early) == 1
        own.error(f"{' '.join(early)} {'goes' if one else 'go'} after the command: autotune {words[at]} {' '.join(early)} ...")


def main(argv: Sequence[str] | None = None, *, started: float | None = None, exits: bool = False) -> int:
    """The command line; ``started`` (``time.monotonic``) is when the command's process began, for ``--budget``
    (default: when the run begins); ``exits``: the process ends with the code returned (the ``autotune`` command),
    so a stop signal after a stopped run's YAML is written is ignored rather than turning its exit code into a death."""
    from autotune.cli._streams import guarded

    # stderr that cannot be written drops the progress and the command goes on (the YAML is still written);
    # stdout that cannot be written is one line on stderr and exit 2
    restore = guarded()
    try:
        return _main(argv, started, exits)
    except UserError as e:  # stdout lost while a parse error was said on it (--json)
        from autotune.study.storage import mask_url

        print(f"autotune: error: {mask_url(str(e))}", file=sys.stderr)
        return e.exit_code
    finally:
        restore()


def _main(argv: Sequence[str] | None, started: float | None, exits: bool = False) -> int:
    try:
        os.getcwd()
    except FileNotFoundError:  # every relative path, and the imports behind them, would fail with a traceback
        print("autotune: error: the current folder no longer exists (removed while the shell was in it); cd to one that does", file=sys.stderr)
        return 2
    from autotune.study.storage import mask_url, remember_secrets

    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    for word in words:  # a storage URL's password stays out of every line printed, however malformed the URL
        remember_secrets(word.partition("=")[2] if word.startswith("--") else word)
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            _options_before_command(parser, words)
            args, extra = parser.parse_known_args(words)
            if extra:
                _unrecognized(parser, getattr(args, "command", None), extra)
    except SystemExit as e:  # --help, --version, or a one-line argument error
        sys.stderr.write(mask_url(said.getvalue()))
        if e.code and "--json" in words:  # a script reading stdout gets JSON for these errors too
            lines = [ln for ln in said.getvalue().splitlines() if ln.strip()]
            _json_error(re.sub(r"^autotune( \S+)?: error: ", "", lines[-1]) if lines else "bad arguments", int(e.code))
        return int(e.code or 0)
    sys.stderr.write(mask_url(said.getvalue()))
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return 2
    if args.verbose and getattr(args, "quiet", False):
        msg = "--quiet and --verbose ask for opposite output; pass one of them"
        print(f"autotune {args.command}: error: {msg} (see 'autotune {args.command} --help')", file=sys.stderr)
        if getattr(args, "json", False):
            _json_error(msg, 2)
        return 2
    args.started = started
    args.exits = exits
    from autotune.cli._output import configure_logging

    restore_logging = configure_logging(args.verbose, quiet=getattr(args, "quiet", False))  # --quiet: errors only
    try:
        try:
            code = int(args._run(args) or 0)
            sys.stdout.flush()  # a result that cannot be written is found here, not at the interpreter's exit
            return code
        except Exception as e:  # noqa: BLE001 - those said in one line are raised as UserError, the rest as they came
            said_so = _one_line(args, e)
            if said_so is None:
                raise
            raise said_so from None
    except UserError as e:
        print(f"autotune: error: {mask_url(str(e))}", file=sys.stderr)
        if getattr(args, "json", False):  # a script reading stdout gets an answer too, as `doctor --json` gives
            _json_error(str(e), e.exit_code)
        return e.exit_code
    except BrokenPipeError as e:  # `autotune studies --json | head`: the reader has gone, as it may
        if not _stdout_gone():  # another pipe broke (a trial process's): that is an error, and says so
            print(f"autotune: error: a pipe broke ({e}); run with --verbose for details", file=sys.stderr)
            return 1
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not fail again
        except (OSError, ValueError):
            pass
        return 141  # 128 + SIGPIPE, what the shell shows for a command that lost its reader
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM during `run` (errors.Terminated)
        code = interrupt_exit_code(e)
        detail = interrupt_detail(e)
        stopped = interrupt_said(e) + (f": {detail}" if detail else "")
        print(f"autotune: {stopped}", file=sys.stderr)
        if getattr(args, "json", False):  # a script reading stdout learns of the stop too
            _json_error(stopped, code)
        return code
    finally:
        restore_logging()


def _one_line(args: argparse.Namespace, e: Exception) -> UserError | None:
    """The one-line error for ``e`` met anywhere in a command, or None for an error that is not one of these: a path
    the system refuses whatever it holds, or the database behind ``--storage`` failing (a damaged file, a lost
    server) while a command reads or writes it."""
    from autotune.study.storage import is_storage_error, storage_failure

    if isinstance(e, OSError) and e.errno == errno.ENAMETOOLONG:
        name = os.fsdecode(e.filename) if e.filename is not None else "a path given"
        return UserError(f"{name[:80]}{'...' if len(name) > 80 else ''} is too long a path for this system ({e.strerror}); pass a shorter one")
    if not isinstance(e, UserError) and hasattr(args, "storage") and is_storage_error(e):
        return storage_failure(args.storage or "sqlite:///autotune.db", e, reading=args.command != "run")  # show's --storage defaults to None: autotune.db
    return None


def _json_error(message: str, code: int) -> None:
    import json

    from autotune.study.storage import mask_url

    message = mask_url(message)
    try:
        json.dump({"error": message, "exit_code": code}, sys.stdout)
        sys.stdout.write("\n")
        sys.stdout.flush()
    except (UserError, OSError):  # stdout is what failed: the line on stderr has said it
        pass


def _stdout_gone() -> bool:
    """Whether standard output is a pipe whose reader has closed it (poll reports an error on its write end)."""
    import select
    import stat

    try:
        fd = sys.stdout.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False
        p = select.poll()
        p.register(fd, select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in p.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def entry() -> None:
    from autotune.cli._streams import open_standard_descriptors
    from autotune.study.budget import process_start

    open_standard_descriptors()  # `2>&-`: a database opened later must not become descriptor 2
    sys.exit(main(started=process_start(), exits=True))
