#!/usr/bin/env python
"""Where a tuning run's time went: each study's ``time`` attribute, what warm processes saved, and per trial its
config, outcome, rate and the seconds of its parts (start-up, build, warm-up, what building ahead hid, close,
release; for a trial that started a kept process, its set-up and, of it, the readying its kind does for the device),
and the re-measurement: what it did, in which process, and its rounds.

    python benchmarks/trial_times.py sqlite:///autotune.db [sqlite:///other.db ...]   # the newest study of each
"""

from __future__ import annotations

import argparse
import sys

KEYS = ("duration_s", "startup_s", "build_s", "warmup_s", "built_ahead_s", "beside_wait_s", "close_s", "release_s", "saved_s", "warm_process",
        "process_setup_s", "ready_s")


def describe(url: str) -> list[str]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    names = optuna.get_all_study_names(url)
    if not names:
        return [f"{url}: no study"]
    study = optuna.load_study(study_name=names[-1], storage=url)
    lines = [f"== {url} {names[-1]}", f"time {study.user_attrs.get('time')}",
             f"warm_processes {study.user_attrs.get('warm_processes')}"]
    c = study.user_attrs.get("confirmation") or {}
    if c:  # the re-measurement: what it did, where, and each round's rates
        p = c.get("paired") or {}
        lines.append(f"confirmation {c.get('method')} | winner {c.get('winner_trial')} fastest {c.get('fastest_trial')} "
                     f"alike {c.get('indistinguishable')} | paired seconds {p.get('seconds')} warm_process {p.get('warm_process')} rounds {p.get('rounds')}")
    for t in study.trials:
        r = t.user_attrs.get("result") or {}
        parts = {k: r[k] for k in KEYS if r.get(k) is not None}
        lines.append(f"  {t.number} {t.state.name} {t.user_attrs.get('config')} {r.get('outcome')} {r.get('samples_per_s')} {parts}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("storage", nargs="+", help="Optuna storage URLs (sqlite:///PATH)")
    for url in p.parse_args(argv).storage:
        sys.stdout.write("\n".join(describe(url)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
