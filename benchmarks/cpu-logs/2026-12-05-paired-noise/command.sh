#!/usr/bin/env bash
# How well one re-measurement tells two close configs apart on the 2-core CPU: DALI's usual start (dali-cpu b=128
# threads=2 queue=2) against dali-cpu b=64 threads=2 queue=4, 5 repetitions each of paired (6 rounds in one process),
# fresh (one process each) and null (A against A, paired), interleaved. Run twice from a worktree of the commit, the
# output copied here as cpu-noise-<commit>.json (every repetition, its rounds, ratio and verdict, and the summary) and
# .log: at 8a37bcf (the same order every round: the null pairs read 0.976-0.997, all below 1) and at 58b3f1b (the
# order turns each round: the null pairs read 0.980-1.026).
cd /tmp/wt-bench && export PYTHONPATH=/tmp/wt-bench
python benchmarks/paired_noise.py --dataset ~/.cache/autotune/demo-2000x10 --device cpu \
  --a '{"backend": "dali", "batch_size": 128, "dali_device": "cpu", "num_threads": 2, "prefetch_queue_depth": 2}' \
  --b '{"backend": "dali", "batch_size": 64, "dali_device": "cpu", "num_threads": 2, "prefetch_queue_depth": 4}' \
  --processes 5 --rounds 6 --null --out /tmp/noise/cpu-noise.json > /tmp/noise/cpu-noise.log 2>&1
