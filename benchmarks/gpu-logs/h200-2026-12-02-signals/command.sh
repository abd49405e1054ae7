#!/usr/bin/env bash
# One H200, 2026-12-02: a default run on 8,000 JPEGs stopped by five SIGTERMs 0.2 s apart once two trials have
# completed (DALI GPU pipelines in flight): the exit code, the last lines, the YAML it wrote; then --if-stale on a
# copy made stale, for a YAML tuned with --pipeline imagenet-eval: the flags it takes, the YAML's pipeline.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
[ -d /tmp/s8k ] || python3 -m autotune synth /tmp/s8k --images 8000 --classes 100 >/dev/null 2>&1
{
echo "== SIGTERM x5 after two trials"
mkdir -p /tmp/sig && cd /tmp/sig && rm -f autotune.yaml
python3 -m autotune run --dataset /tmp/s8k --no-report --storage sqlite:///sig.db > run.out 2> run.err &
pid=$!
for i in $(seq 120); do [ "$(grep -c ': complete' run.err)" -ge 2 ] && break; sleep 0.5; done
for i in 1 2 3 4 5; do kill -TERM $pid; sleep 0.2; done
wait $pid; echo "rc=$?"
grep -vE "^\s*$" run.err | tail -6 | cut -c1-220
grep -E "^  (samples_per_s|speedup_vs_defaults)|^  backend|^  batch_size" autotune.interrupted.yaml autotune.yaml 2>/dev/null | head -6
echo "== --if-stale on an eval YAML"
mkdir -p /tmp/ev && cd /tmp/ev
python3 -m autotune run --dataset /tmp/s8k --pipeline imagenet-eval --space dali --budget 30 --no-report --out ev.yaml 2>&1 | grep -E "^best"
sed -i 's/cpus: 16,/cpus: 64,/' ev.yaml
python3 -m autotune run --if-stale ev.yaml --budget 30 --no-report 2>&1 | grep -E "stale|^best|^wrote"
grep -E "^pipeline|retune_flags" ev.yaml
} 2>&1 | tee $OUT/verify.log
