#!/usr/bin/env bash
# One H200, 2026-12-01, after the review fixes: the same checks as checks-6 (the CUDA tests; a default run; AutoLoader on
# two torchrun ranks sharing the GPU: one rank's folder missing, then a normal run; `show` of its YAML and its report).
exec bash benchmarks/gpu-logs/h200-2026-12-01-checks-6/command.sh
