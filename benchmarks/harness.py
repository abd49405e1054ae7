"""What the benchmark scripts share: the repository on ``sys.path``, the machine's stamp, the command line of a run,
RESULTS.md's sections, JSON result files, and configs measured side by side in fresh processes, interleaved.

A script in this folder imports it first (``import harness``): the import puts the repository root on ``sys.path``,
so ``autotune`` is the checkout's, whatever is installed.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import random
import re
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "RESULTS.md"
RESULTS_DIR = BENCH / "results"

HEADER = """# Benchmark results

Each table names the command that wrote it; the scripts and how to run them are in benchmarks/README.md. A section
held between two HTML comments is written by its script, and a newer run on the same kind of machine replaces it.
"""


def note(message: str) -> None:
    """A line of progress on stderr (stdout is kept for results)."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


# ------------------------------------------------------------------------------------------------ stamps
def machine() -> dict[str, Any]:
    """This machine's fingerprint (``autotune.config.fingerprint.collect``) with Optuna's version."""
    import optuna

    from autotune.config import fingerprint

    fp = fingerprint.collect()
    fp["optuna"] = getattr(optuna, "__version__", None)
    return fp


def machine_kind(fp: dict[str, Any]) -> str:
    """The key of a machine's RESULTS.md section: a newer run on the same kind of machine replaces it."""
    if fp.get("gpus"):
        return f"gpu: {fp.get('gpus')}x {fp.get('gpu')}, {fp.get('cpus')} cores"
    return f"cpu: {fp.get('cpus')} cores, no GPU"


def machine_line(fp: dict[str, Any]) -> str:
    """The ``Machine:`` line of a section: cores, memory, GPUs and the library versions."""
    gpu = f"{fp['gpus']}x {fp['gpu']} ({fp.get('gpu_mib')} MiB, driver {fp.get('driver')}, CUDA {fp.get('cuda')})" if fp.get("gpus") else "no GPU"
    return (f"{fp.get('cpus')} usable CPU cores ({fp.get('cpus_online')} online), {fp.get('ram_gib')} GiB RAM, {gpu}; "
            f"Python {fp.get('python')}, torch {fp.get('torch')}, torchvision {fp.get('torchvision')}, DALI {fp.get('dali') or 'not installed'}, "
            f"Optuna {fp.get('optuna')}")


def utc_now() -> str:
    """The time stamp of a run, e.g. ``2026-11-30 05:05 UTC``."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def new_run_id() -> str:
    """An id for one run of a benchmark, kept in each of its rows: ``20261203T071530-4242``."""
    return f"{_dt.datetime.now(_dt.timezone.utc).strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"


def commit() -> str | None:
    """The commit the benchmark ran at: ``AUTOTUNE_BENCH_COMMIT`` (a copy of the tree without its .git), else git's."""
    if os.environ.get("AUTOTUNE_BENCH_COMMIT"):
        return os.environ["AUTOTUNE_BENCH_COMMIT"]
    import subprocess

    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    return (proc.stdout.strip() or None) if proc.returncode == 0 else None


def command_line(script: str, argv: Sequence[str] | None = None) -> str:
    """The command that ran ``script`` (a file in benchmarks/) with ``argv`` (default: this process's arguments)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return " ".join(["python", f"benchmarks/{Path(script).name}", *([shlex.join(args)] if args else [])])


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child process: this one's, with the repository first on ``PYTHONPATH``."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


# -------------------------------------------------------------------------------------------- RESULTS.md
def write_section(kind: str, text: str, path: Path = RESULTS) -> None:
    """Put ``text`` (starting ``<!-- section: KIND -->``) into ``path``, replacing the section of the same kind."""
    old = path.read_text() if path.exists() else HEADER
    pat = re.compile(rf"<!-- section: {re.escape(kind)} -->.*?<!-- /section: {re.escape(kind)} -->\n?", re.S)
    body = text.rstrip("\n") + "\n"
    new = pat.sub(lambda _: body, old, count=1) if pat.search(old) else old.rstrip("\n") + "\n\n" + body
    tmp = path.with_suffix(".tmp")
    tmp.write_text(new)
    tmp.replace(path)


# -------------------------------------------------------------------------------------------- JSON files
def read_json(path: Path) -> Any:
    """The JSON at ``path``, or None when there is no such file."""
    return json.loads(path.read_text()) if path.exists() else None


def write_json(path: Path, data: Any, indent: int = 1) -> None:
    """Write ``data`` to ``path`` whole or not at all (a temporary file renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=indent, default=str) + "\n")
    tmp.replace(path)


def append_rows(path: Path, rows: list[dict[str, Any]], replaces: Callable[[dict[str, Any]], bool] | None = None) -> None:
    """Add ``rows`` to the JSON list at ``path``; the rows ``replaces`` picks among the old ones are dropped first."""
    old = read_json(path) or []
    write_json(path, [r for r in old if replaces is None or not replaces(r)] + rows)


# ---------------------------------------------------------------------------------------- data and model
def ensure_data(path: Path, images: int, classes: int, small: bool = False) -> None:
    """A synthetic image folder at ``path`` with at least ``images`` JPEGs (made when missing; ``small``: 64-96 px)."""
    from autotune.dataset.synth import synthesize

    if path.exists() and sum(1 for _ in path.rglob("*.jpg")) >= images:
        return
    note(f"writing {images} synthetic images in {classes} classes under {path} ...")
    kw: dict[str, Any] = {"min_side": 64, "max_side": 96, "workers": 1} if small else {}
    synthesize(path, images=images, classes=classes, **kw)


def tiny_model(classes: int, device: str) -> Any:
    """A one-layer convolutional net for smoke runs: cheap on any CPU, still a real forward and backward."""
    import torch

    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 7, stride=8), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                               torch.nn.Linear(8, classes)).to(device)


def cuda_sync(device: str) -> None:
    """Wait for the GPU's queued work when ``device`` is a CUDA device; nothing on the CPU."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


# ------------------------------------------------------------------------------- configs side by side
class SideBySide:
    """Configs measured side by side: each measurement a fresh process forked from one pre-imported process (as a
    trial is), all with the same measurement and the same memory budgets; a config predicted or found not to fit is
    recorded as failing, with its error."""

    def __init__(self, dataset: Any, *, pipeline: str, device: str, window: float, windows: int, trial_timeout: float, ranks: int = 1,
                 model: Any = None, reserve_gpu_mib: float = 0.0, warmup_batches: int = 2) -> None:
        from autotune.trials import guard
        from autotune.trials.zygote import Zygote

        self.dataset, self.pipeline, self.device, self.window, self.windows = dataset, pipeline, device, window, windows
        self.trial_timeout, self.ranks, self.model, self.warmup_batches = trial_timeout, ranks, model, warmup_batches
        self.budgets = guard.default_budgets(reserve_gpu_mib=reserve_gpu_mib, device=device)
        self.zygote: Any = Zygote.start()

    def close(self) -> None:
        if self.zygote:
            self.zygote.close()
            self.zygote = None

    def __enter__(self) -> SideBySide:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def once(self, params: dict[str, Any]) -> tuple[float | None, str]:
        """One measurement: (samples/s, "") or (None, "outcome: message")."""
        from autotune.config.schema import LoaderConfig
        from autotune.outcomes import Outcome
        from autotune.trials import guard
        from autotune.trials.runner import run_trial
        from autotune.trials.spec import TrialSpec

        spec = TrialSpec(dataset=self.dataset, loader=LoaderConfig.from_params(params), pipeline=self.pipeline, device=self.device,
                         warmup_batches=self.warmup_batches, window_s=self.window, windows=self.windows, ranks=self.ranks, model=self.model)
        over = guard.check_estimate(spec.loader, self.dataset, self.budgets, pipeline=self.pipeline, device=self.device, ranks=self.ranks, model=self.model)
        r = over or run_trial(spec, timeout_s=self.trial_timeout, budgets=self.budgets, zygote=self.zygote)
        if r.outcome is Outcome.COMPLETE and r.samples_per_s:
            return float(r.samples_per_s), ""
        return None, f"{r.outcome.value}: {r.message[:200]}"

    def keep_largest_batch(self, cand: dict[str, dict[str, Any]]) -> None:
        """The largest batch that fits: try the ``largest batch (N)`` peers from the largest down; keep the first that completes."""
        largest = [k for k in cand if k.startswith("largest batch")]
        kept = None
        for k in largest:
            rate, err = self.once(cand[k])
            note(f"  {k}: {'fits' if rate else err}")
            if rate:
                kept = k
                break
        for k in largest:
            if k != kept:
                del cand[k]

    def rounds(self, cand: dict[str, dict[str, Any]], rounds: int, seed: int = 0,
               after_round: Callable[[dict[str, list[float]], dict[str, str]], Any] | None = None) -> tuple[dict[str, list[float]], dict[str, str]]:
        """Every config once a round, in a new random order each round; the rates of those that completed, the errors of
        the rest. ``after_round`` is called with both after each round (a run cut short keeps what it measured)."""
        scores: dict[str, list[float]] = {k: [] for k in cand}
        errors: dict[str, str] = {}
        names = list(cand)
        rng = random.Random(seed)
        for r in range(rounds):
            rng.shuffle(names)
            for k in names:
                rate, err = self.once(cand[k])
                if rate:
                    scores[k].append(rate)
                else:
                    errors[k] = err
                note(f"round {r + 1}/{rounds} {k}: {f'{rate:,.0f}/s' if rate else err}")
            if after_round is not None:
                after_round(scores, errors)
        return scores, errors
