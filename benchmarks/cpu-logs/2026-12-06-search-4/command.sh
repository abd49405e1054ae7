#!/usr/bin/env bash
# The 2-core CPU's search account at 755a0bb (two paired rounds that disagree do not tell configs apart; over two
# rounds a config below a start by their mean ratio is not handed over), against the 51-config grid of
# 2026-12-06-search.
# Run from a worktree of the commit (git worktree add /tmp/wt 755a0bb), nothing else running. The 3 rows were appended
# to benchmarks/results/cpu-search.json (the copy below, whole), then python benchmarks/headlines.py.
cd /tmp/wt && WORK=/tmp/cpus10 bash /work/main/benchmarks/cpu_search.sh   # what ran, as benchmarks/cpu_search.sh now writes it
