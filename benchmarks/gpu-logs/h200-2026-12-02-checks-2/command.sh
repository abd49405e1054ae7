#!/usr/bin/env bash
# One H200, 2026-12-02, at the change after the review (the defaults priced at the median trial, SIGHUP held, signals
# after the YAML stop the report): the same script as h200-2026-12-02-checks.
exec bash benchmarks/gpu-logs/h200-2026-12-02-checks/command.sh
