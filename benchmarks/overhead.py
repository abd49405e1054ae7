"""What does the measurement loop cost? ``autotune.trials.measure.measure`` against a bare loop, on ready tensors.

The loader hands over ready CPU tensors at no cost (each epoch is ``iter()`` over a list of pre-built
``(images, labels)`` batches, ImageNet's 5,005 batches of 256), so anything the harness adds per batch shows
in full. Both loops are timed the same way: samples over seconds of ``time.process_time`` (this process's
CPU time, so other processes on a shared machine do not count; ``--clock wall`` for ``perf_counter``), the
bare loop

    for batch in it:
        n += batch[1].shape[0]

over as many epochs as fill the same time as ``measure()``'s windows. Rounds alternate between the two; the
overhead is the bare loop's rate over measure()'s, minus one, from the best round of each (the least
disturbed by other processes) and, for the record, from the medians. It must stay under 2 %.

    python benchmarks/overhead.py [--rounds 21] [--window 0.2] [--windows 3] [--clock cpu|wall]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import harness
import torch

from autotune.trials.measure import measure  # noqa: E402

LIMIT = 0.02


class Ready:
    """A re-iterable loader of ready tensors: every epoch yields the same pre-built batches."""

    def __init__(self, batches: int = 5005, batch_size: int = 256) -> None:
        images = torch.zeros(batch_size, 3, 8, 8)  # the size of the images does not matter: nothing copies them
        self.batches = [(images, torch.zeros(batch_size, dtype=torch.int64)) for _ in range(batches)]

    def __iter__(self):
        return iter(self.batches)


def bare(loader: Ready, seconds: float, clock=time.process_time) -> float:
    n = 0
    start = clock()
    while True:
        for batch in loader:
            n += batch[1].shape[0]
        elapsed = clock() - start
        if elapsed >= seconds:
            return n / elapsed


def run(rounds: int, window_s: float, windows: int, clock=time.process_time) -> dict[str, float]:
    loader = Ready()
    measure(loader, "cpu", window_s=window_s, windows=windows, clock=clock)  # warm both paths once
    bare(loader, window_s, clock)
    b, m = [], []
    for _ in range(rounds):
        b.append(bare(loader, window_s * windows, clock))
        m.append(measure(loader, "cpu", warmup_batches=2, window_s=window_s, windows=windows, clock=clock).samples_per_s)
    return {"best": max(b) / max(m) - 1, "median": statistics.median(b) / statistics.median(m) - 1,
            "bare_best": max(b), "measure_best": max(m), "ns_per_batch": 256e9 / max(b)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="the cost of autotune.trials.measure.measure() over a bare loop")
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--window", type=float, default=0.2)
    p.add_argument("--windows", type=int, default=3)
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="process_time (default) or perf_counter")
    p.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    a = p.parse_args(argv)
    r = run(a.rounds, a.window, a.windows, time.process_time if a.clock == "cpu" else time.perf_counter)
    ok = r["best"] < LIMIT
    line = (f"measure() overhead over a bare loop: {100 * r['best']:+.2f} % (best rounds; medians: {100 * r['median']:+.2f} %); "
            f"bare loop {r['bare_best'] / 1e6:,.1f} M samples/s ({r['ns_per_batch']:.0f} ns a batch of 256), "
            f"measure() {r['measure_best'] / 1e6:,.1f} M samples/s; limit {100 * LIMIT:.0f} %: {'pass' if ok else 'FAIL'}")
    print(line)
    if not a.no_write:
        fp = harness.machine()
        kind = "overhead, " + harness.machine_kind(fp)
        cmd = harness.command_line(__file__, argv)
        text = "\n".join([
            f"<!-- section: {kind} -->", f"## Harness overhead ({harness.machine_kind(fp)})", "",
            f"- Machine: {harness.machine_line(fp)}",
            f"- Run: {harness.utc_now()}, {a.rounds} alternating rounds, windows of {a.window} s x {a.windows}, "
            f"clock: {'process CPU time' if a.clock == 'cpu' else 'wall (perf_counter)'}; "
            "loader: ready CPU tensors, 5,005 batches of 256 an epoch",
            f"- Command: `{cmd}`", "", f"**{line}**", "", f"<!-- /section: {kind} -->",
        ])
        harness.write_section(kind, text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
