#!/usr/bin/env bash
# One H200, 2026-12-01, after the tidy of the whole change: the same checks as checks-6.
exec bash benchmarks/gpu-logs/h200-2026-12-01-checks-6/command.sh
