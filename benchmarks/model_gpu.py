#!/usr/bin/env python
"""Model in the loop on the GPU machine: ResNet-50 (bf16) training samples/s, side by side from one study.

Makes (or reuses) the 8,000-image synthetic set, runs one ``autotune run --model resnet50 --amp`` study over the
default space (torch DataLoader and DALI), then reads the stored study and prints, and appends to
``benchmarks/RESULTS.md`` with the command: the model's ceiling (per batch size), the defaults', the best torch
config's and the best DALI config's training samples/s, the config the "enough" rule chose and its fraction of
the ceiling (>= 95 %?), and the DALI / torch ratio.

Run from the repository root on the GPU machine (about 6-8 minutes on one H200, data generation apart)::

    python benchmarks/model_gpu.py                      # data in /tmp/autotune-synth-8000, study in /tmp/autotune-model-gpu
    python benchmarks/model_gpu.py --data DIR --n-trials 20 --no-append

One DALI GPU-decode config (and its two neighbours) is enqueued first through ``--warm-start``, so the table
always has a DALI row; ``--no-seed-dali`` leaves the sampler alone.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import harness
from harness import ROOT as REPO

#: "about doubles" holds from this ratio of best DALI to best torch training samples/s
DOUBLES = 1.8


def _fmt(x: float | None, spec: str = ",.0f") -> str:
    return "–" if x is None else format(x, spec)


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.1%}"


def seed_dali(work: Path, batch_size: int) -> Path:
    """A DALI GPU-decode config to enqueue first (the study still samples the rest of the space)."""
    from autotune.config import fingerprint
    from autotune.config.files import save_config
    from autotune.config.schema import Config, LoaderConfig

    cores = os.cpu_count() or 8
    loader = LoaderConfig.from_params({"backend": "dali", "batch_size": batch_size, "dali_device": "gpu", "num_threads": max(1, cores // 4),
                                       "prefetch_queue_depth": 2, "hw_decoder_load": 0.65})
    path = work / "seed-dali.yaml"
    save_config(Config(loader=loader, device="cuda", hardware=fingerprint.collect()), path)
    return path


def table(summary: dict, study_attrs: dict) -> str:
    """The side-by-side table as Markdown."""
    ceiling = study_attrs.get("model_ceiling") or {}
    lines = [
        "| | config | training samples/s | of ceiling (same batch) | loader CPU threads | peak host MiB | peak GPU MiB |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for b, row in sorted((ceiling.get("per_batch_size") or {}).items(), key=lambda kv: int(kv[0])):
        rate = row.get("samples_per_s")
        lines.append(f"| model ceiling (batch resident on the device) | b={b} | {_fmt(rate) if rate else row.get('outcome')} | {'100%' if rate else '–'} | 0 | – | {_fmt(row.get('model_gpu_mib'))} |")
    for r in summary["rows"]:
        if r.get("samples_per_s") is None:
            lines.append(f"| {r['label']} | no complete trial | – | – | – | – | – |")
            continue
        lines.append(f"| {r['label']} | `{r['config']}` (trial {r['trial']}) | {_fmt(r['samples_per_s'])} | {_pct(r.get('fraction_of_ceiling'))} | "
                     f"{r['cpu_threads']} | {_fmt(r.get('peak_host_mib'))} | {_fmt(r.get('peak_gpu_mib'))} |")
    return "\n".join(lines)


def verdicts(summary: dict) -> list[str]:
    out = []
    frac = summary.get("chosen_fraction_of_ceiling")
    out.append(f"- Chosen config at {_pct(frac)} of the model's ceiling at its batch size: "
               + ("**reaches** 95 %." if summary["reaches_95_percent"] else "**does not reach** 95 %."))
    sel = summary.get("selection") or {}
    if sel:
        h = sel.get("headroom") or {}
        out.append(f"- Enough rule (tolerance {sel.get('tolerance', 0):.0%}): fastest was trial {sel.get('fastest_trial')} "
                   f"({_fmt(sel.get('fastest_samples_per_s'))}/s, `{sel.get('fastest_config')}`); chosen trial {sel.get('chosen_trial')} "
                   f"({_fmt(sel.get('chosen_samples_per_s'))}/s) saves {h.get('cpu_workers_saved')} loader CPU threads and "
                   f"{_fmt(h.get('host_mib_saved'))} MiB of host memory.")
    ratio = summary.get("dali_over_torch")
    if ratio is None:
        out.append("- DALI / torch: not measured (no complete trial for one of them).")
    else:
        holds = ratio >= DOUBLES
        out.append(f"- Best DALI / best torch training samples/s = **{ratio:.2f}x**: the seeds' \"DALI about doubles ResNet-50 "
                   f"throughput\" {'**holds**' if holds else '**does not hold**'} on this machine.")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="/tmp/autotune-synth-8000", help="synthetic dataset folder (made if missing)")
    p.add_argument("--work", default="/tmp/autotune-model-gpu", help="study database and YAML go here")
    p.add_argument("--images", type=int, default=8000)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--model", default="resnet50")
    p.add_argument("--n-trials", type=int, default=20)
    p.add_argument("--timeout", type=int, default=360, help="stop sampling new trials after this many seconds")
    p.add_argument("--no-seed-dali", action="store_true", help="do not enqueue a DALI GPU-decode config first")
    p.add_argument("--no-append", action="store_true", help="print the table only; do not append to benchmarks/RESULTS.md")
    p.add_argument("--step-ms", type=float, default=None, help="a simulated model instead of --model (a dry run on any machine)")
    p.add_argument("--extra", default="", help="more 'autotune run' flags, e.g. --extra=--channels-last")
    a = p.parse_args(argv)

    data, work = Path(a.data).resolve(), Path(a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    harness.ensure_data(data, a.images, a.classes)
    study_name = f"model-gpu-{'sim' if a.step_ms else a.model}-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    storage = f"sqlite:///{work}/model_gpu.db"
    model = ["--step-ms", f"{a.step_ms:g}"] if a.step_ms else ["--model", a.model, "--amp"]
    cmd = ["autotune", "run", "--dataset", str(data), "--space", "default", *model, "--n-trials", str(a.n_trials), "--timeout", str(a.timeout),
           "--window", "0.5", "--windows", "3", "--warmup-batches", "3", "--trial-timeout", "90", "--confirm-top", "3", "--confirm-repeats", "1",
           "--storage", storage, "--study-name", study_name, "--out", str(work / "autotune-model.yaml"), "--no-report", "--json", *shlex.split(a.extra)]
    from autotune._imports import is_available
    from autotune.config import fingerprint

    if not a.no_seed_dali and is_available("dali") and fingerprint.collect().get("gpus"):
        cmd += ["--warm-start", str(seed_dali(work, 128))]
    shown = " ".join(shlex.quote(c) for c in cmd)
    print(f"$ {shown}", file=sys.stderr)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "autotune", *cmd[1:]], env=harness.child_env(), cwd=REPO, stdout=subprocess.PIPE, text=True)
    took = time.monotonic() - t0
    if proc.returncode != 0:
        print(f"autotune run exited with {proc.returncode} after {took:.0f} s", file=sys.stderr)
        return proc.returncode

    import optuna

    from autotune.study.selection import training_summary

    study = optuna.load_study(study_name=study_name, storage=storage)
    summary = training_summary(study)
    attrs = study.user_attrs
    hw = attrs.get("hardware") or {}
    gpu = f"{hw.get('gpus')} x {hw.get('gpu')}" if hw.get("gpus") else "CPU only"
    done = sum(1 for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE)
    text = "\n".join([
        f"## Model in the loop: {summary.get('model')} training on {gpu}, {hw.get('cpus')} CPUs "
        f"({_dt.date.today().isoformat()})",
        "",
        f"Command: `python benchmarks/model_gpu.py` (dataset: `autotune synth {data} --images {a.images} --classes {a.classes}`), which ran:",
        "",
        f"```\n{shown}\n```",
        "",
        f"One study, {len(study.trials)} trials ({done} complete), {took:.0f} s in all. Training samples/s = forward, backward and "
        "SGD step of the model on each delivered batch, inside the clock; the ceiling is the same steps on one batch already on the device.",
        "",
        table(summary, attrs),
        "",
        *verdicts(summary),
        "",
    ])
    print(text)
    print(json.dumps(summary, default=str), file=sys.stderr)
    if not a.no_append:
        results = harness.RESULTS
        with open(results, "a", encoding="utf-8") as f:
            f.write(("\n" if results.exists() and results.stat().st_size else "") + text)
        print(f"appended to {results}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
