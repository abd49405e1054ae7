"""How long storing a study's trials takes in SQLite: a measurement as one user attribute (what the tuner writes)
against a write per field (what it wrote before), 20 trials each, in fresh databases, alternating (the time from the first trial asked to the last told).

    python benchmarks/storage.py [--trials 20] [--rounds 5]

Appends a row per round to benchmarks/results/storage.json and writes the "storage" section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import harness


def store(trials: int, one_attribute: bool, folder: Path) -> float:
    """Seconds to store ``trials`` measured trials as the tuner does, in a new SQLite database under ``folder``."""
    import optuna

    from autotune.config.schema import LoaderConfig
    from autotune.outcomes import Outcome
    from autotune.study.evidence import record_result
    from autotune.trials.spec import TrialResult

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{folder / ('one.db' if one_attribute else 'fields.db')}"
    study = optuna.create_study(storage=url, direction="maximize")
    loader = LoaderConfig.from_params({"backend": "torch", "batch_size": 64, "num_workers": 2})
    result = TrialResult(Outcome.COMPLETE, samples_per_s=1000.0, spread=(950.0, 1050.0), windows=[990.0, 1000.0, 1010.0], steady_from=0,
                         startup_s=0.4, warmup_s=0.1, peak_host_mib=800.0, peak_gpu_mib=None, duration_s=3.2, message="3 steady windows")
    t0 = time.perf_counter()
    for _ in range(trials):
        trial = study.ask()
        trial.set_user_attr("owner", "host:1")  # the writes before a trial measures, the same in both layouts
        trial.set_user_attr("loader", loader.to_params())
        trial.set_user_attr("config", loader.describe())
        if one_attribute:
            record_result(trial, result.to_attrs())
        else:
            for k, v in result.to_attrs().items():
                trial.set_user_attr(k, v)
        study.tell(trial, 1000.0)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    fp = harness.machine()
    run = harness.utc_now()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        store(2, True, Path(d))  # imports and SQLAlchemy's first engine: not part of either layout's time
    for r in range(args.rounds):
        for one in ((True, False) if r % 2 == 0 else (False, True)):  # alternate which goes first
            with tempfile.TemporaryDirectory() as d:
                s = store(args.trials, one, Path(d))
            rows.append({"run": run, "round": r, "layout": "one attribute" if one else "a write per field", "trials": args.trials, "seconds": round(s, 3)})
            harness.note(f"round {r}: {rows[-1]['layout']}: {s:.2f} s")
    harness.append_rows(harness.RESULTS_DIR / "storage.json", rows)
    lines = ["<!-- section: storage -->", "## Storing trials in SQLite", "", f"- Machine: {harness.machine_line(fp)}", f"- Run: {run}", "",
             "Command:", "", "```", harness.command_line("storage.py"), "```", "",
             f"| layout | seconds for {args.trials} trials, median | every round |", "|---|---:|---|"]
    for layout in ("one attribute", "a write per field"):
        secs = [x["seconds"] for x in rows if x["layout"] == layout]
        lines.append(f"| {layout} | {statistics.median(secs):.2f} | {', '.join(f'{s:.2f}' for s in secs)} |")
    lines.append("<!-- /section: storage -->")
    harness.write_section("storage", "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
