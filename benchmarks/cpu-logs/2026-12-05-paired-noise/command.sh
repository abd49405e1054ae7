#!/usr/bin/env bash
# How well one re-measurement tells two close configs apart on the 2-core CPU: DALI's usual start (dali-cpu b=128
# threads=2 queue=2) against dali-cpu b=64 threads=2 queue=4, 5 repetitions each of paired (6 rounds in one process),
# fresh (one process each) and null (A against A, paired), interleaved. Run from a worktree of 8a37bcf. Output:
# cpu-noise-8a37bcf.json (every repetition, its rounds, ratio and verdict, and the summary) and the log beside it.
cd /tmp/wt-bench && export PYTHONPATH=/tmp/wt-bench
python benchmarks/paired_noise.py --dataset ~/.cache/autotune/demo-2000x10 --device cpu \
  --a '{"backend": "dali", "batch_size": 128, "dali_device": "cpu", "num_threads": 2, "prefetch_queue_depth": 2}' \
  --b '{"backend": "dali", "batch_size": 64, "dali_device": "cpu", "num_threads": 2, "prefetch_queue_depth": 4}' \
  --processes 5 --rounds 6 --null --out /tmp/noise/cpu-noise.json > /tmp/noise/cpu-noise.log 2>&1
