#!/usr/bin/env bash
# The 2-core CPU's search account at 7f96450 (a paired re-measurement planned where two rounds fit and no fresh round
# does; two paired rounds that disagree do not tell configs apart), against the 51-config grid of 2026-12-06-search.
# Run from a worktree of the commit (git worktree add /tmp/wt 7f96450), nothing else running. The 3 rows were appended
# to benchmarks/results/cpu-search.json (the copy below, whole), then python benchmarks/headlines.py.
cd /tmp/wt && WORK=/tmp/cpus9 bash /work/main/benchmarks/cpu_search.sh   # what ran, as benchmarks/cpu_search.sh now writes it
