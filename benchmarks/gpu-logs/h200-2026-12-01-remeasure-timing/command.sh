#!/usr/bin/env bash
# One H200, at 96e785a (before the re-measurement kept the trials' process): the default run with each measurement
# and each Tuner.close timed, to see where the re-measurement's time went. Printed lines kept in verify.log.
export PYTHONPATH=/tmp/site:$PWD; cd /tmp && rm -rf d3 && mkdir d3 && cd d3 && python3 - <<'PY' 2>&1 | grep -E "^T |took|re-meas" | tail -30
import time, sys
from autotune.study import tuner as tm
from autotune.cli import main
t00 = time.monotonic()
orig_measure, orig_close, orig_cands = tm.Tuner.measure, tm.Tuner.close, tm.Tuner.candidates
def measure(self, loader, *a, **k):
    t0 = time.monotonic(); r = orig_measure(self, loader, *a, **k)
    print(f"T measure {loader.describe()} {t0 - t00:.1f} -> {time.monotonic() - t00:.1f} ({time.monotonic() - t0:.1f} s) dur={getattr(r, 'duration_s', None)} startup={getattr(r,'extra',{}).get('startup_s') if hasattr(r,'extra') else None}", file=sys.stderr)
    return r
def close(self):
    t0 = time.monotonic(); orig_close(self); print(f"T close {t0 - t00:.1f} ({time.monotonic() - t0:.1f} s)", file=sys.stderr)
def cands(self, *a, **k):
    t0 = time.monotonic(); r = orig_cands(self, *a, **k); print(f"T candidates {t0 - t00:.1f} ({time.monotonic() - t0:.1f} s)", file=sys.stderr); return r
tm.Tuner.measure, tm.Tuner.close, tm.Tuner.candidates = measure, close, cands
main(["run", "--dataset", "/tmp/s8k", "--no-report"])
PY
