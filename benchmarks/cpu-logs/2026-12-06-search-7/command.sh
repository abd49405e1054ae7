#!/usr/bin/env bash
# The 2-core CPU's search account at 331cdbd (the paired re-measurement in the search's kept process; the budget
# pricing the contenders the re-measurement takes, the less of their kept-process and fresh prices), against the
# 51-config grid of 2026-12-06-search.
# Run from a worktree of the commit (git worktree add /tmp/wt 331cdbd), nothing else running. The 3 rows were appended
# to benchmarks/results/cpu-search.json (the copy below, whole), then python benchmarks/headlines.py.
cd /tmp/wt && WORK=/tmp/cpus13 bash /work/main/benchmarks/cpu_search.sh   # what ran, as benchmarks/cpu_search.sh now writes it
