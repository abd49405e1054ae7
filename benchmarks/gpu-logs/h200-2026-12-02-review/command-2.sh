#!/usr/bin/env bash
# One H200, 2026-12-02, after the decoding changes (EXIF orientation, 16-bit and float images, baselines outside the
# space): the CUDA tests (the mixed decoder against the torch backend on the 16-bit, float and EXIF-turned images
# among them), then a run with --space dali: its YAML must be DALI, with no torch_fallback.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 | tail -3 | tee $OUT/tests-2.log
python3 -m autotune synth /tmp/s8k --images 8000 --classes 100 >/dev/null 2>&1
{
echo "== --space dali --budget 45"
mkdir -p /tmp/r4 && cd /tmp/r4 && python3 -m autotune run --dataset /tmp/s8k --space dali --budget 45 --no-report 2>&1 | grep -E "^(trial|best|took|warning)" | cut -c1-200
grep -E "^  backend|^torch_fallback|^  (samples_per_s|heuristic_samples_per_s|defaults_samples_per_s)" autotune.yaml | cut -c1-200
} 2>&1 | tee $OUT/verify-c.log
# After the float TIFF was left to the scan (tests-3.log): python3 -m pytest -q -p no:cacheprovider -m cuda tests
# After the tidy (open_rgb through ImageOps.exif_transpose): python3 -m pytest -q -p no:cacheprovider -m cuda tests -> tests-tidy.log
