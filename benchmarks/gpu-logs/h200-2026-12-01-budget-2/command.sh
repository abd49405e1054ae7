#!/usr/bin/env bash
# One H200, 2026-12-01: the same three default runs as the budget log, the re-measurement's time kept from the trials
# and sampling stopped while two contenders still fit at their own trial time: where the time went, what was re-measured.
exec bash benchmarks/gpu-logs/h200-2026-12-01-budget/command.sh
