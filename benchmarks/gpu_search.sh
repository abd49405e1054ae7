#!/usr/bin/env bash
# The search's harder truth on the H200 (benchmarks/time_to_quality.py), in stages of one call each (under nine
# minutes), all on one machine (the work folder lives in its /tmp). Run from the repository's root with DALI and
# Optuna on PYTHONPATH (../shared/gpu: five carried parts, installed into /tmp/site), e.g.
#   AUTOTUNE_BENCH_COMMIT=<sent commit> STAGE=default bash benchmarks/gpu_search.sh
# then STAGE=grid (run it again while it exits 3: it resumes), STAGE=methods, STAGE=compare. Back here:
#   cp OUT/h200-search.json benchmarks/results/h200-search.json && python benchmarks/headlines.py
# and, with the compare's log kept under benchmarks/gpu-logs/<machine>-<date>-search*/compare.log,
#   python benchmarks/start_spread.py --results benchmarks/RESULTS.md
#
# Stages:
#  default:  two default 60 s runs back to back on DATA (the first probes torch, the second reads the remembered
#            probe): the run's own lines (configs measured, sampled, what warm processes saved) and its time attr
#  grid:     --grid-wide, one round each (62 configs), --time-budget 480
#  methods:  three default `autotune run`s, seeds 1-3; where each trial's time went in OUT/trials.log
#  compare:  the grid's best 8 and every default run's winner, 3 interleaved rounds; rows appended to
#            OUT/h200-search.json (a copy of benchmarks/results/h200-search.json first, so the file comes back whole)
#  noise:    benchmarks/paired_noise.py: DALI's usual start (b=128 threads=8 hw_load=0.65) against the grid's best of
#            2026-12-03 (b=256 threads=12 hw_load=0.75), 5 repetitions of paired (6 rounds), fresh (one process each) and
#            null (the start against itself), interleaved: OUT/noise.json and OUT/noise.log
#  line:     where GPU decode's second start changes with the cores (mixed decode on 16 and more, the hardware decoder
#            alone below): under `taskset -c 0-7`, the hardware-decoder start (b=256 threads=4 hw_load=1) against the
#            mixed one at 8 cores (b=256 threads=6 hw_load=0.5), benchmarks/paired_noise.py, 5 repetitions of paired and
#            fresh, interleaved (about 3 minutes): OUT/line8.json and OUT/line8.log
#  build:    benchmarks/dali_build.py: where a DALI trial's build goes (the definition, Pipeline.build, the iterator,
#            the first batch), one knob at a time around DALI's usual start, 3 interleaved rounds in one process
#            and the usual start built in 2 and in 3 fresh processes at once (about two minutes; BUILD_ROUNDS, and BUILD_ARGS
#            in place of --parallel 2,3, e.g. "--held --rate-s 1": each config beside a held decoder too): OUT/dali-build.json and OUT/dali-build.log
#  held:     what the GPU decoder a kept DALI trial process holds (autotune.loaders.backends._dali.hold_decoders) changes:
#            benchmarks/dali_build.py --held --rate-s 1 on DALI's usual start, the mixed start and CPU decode, 3 rounds
#            (each build alone, then beside the held decoder; a second of batches timed after each first batch), then a
#            default 60 s run (--seed 2) and where its trials' time went (about 2 minutes): OUT/held.json, OUT/held.log
#  cuda:     the CUDA tests (python3 -m pytest -m cuda tests)
#  imports:  three fresh processes timing the imports of torch, torchvision, autotune's trial modules and DALI, then
#            the "ready in" line of each zygote.log under WORK/reports: OUT/imports.log (about 20 s)
#  ahead:    default 60 s runs with --build-ahead off and on, interleaved (off, on, off, on; seeds 1 and 2): each run's
#            last lines (configs measured, sampled, what the overlap hid) and its time attr, in OUT/ahead.log
# STAGE may name several, comma-separated, run in order (STAGE=methods,cuda). After each stage the work folder comes
# back as OUT/work; carried in as ./gpu-work (an ignored path), it seeds an empty WORK, so a later machine resumes.
# Env: DATA (default /tmp/s8k: 8,000 synthetic JPEGs, written when missing, about 60 s), WORK (/tmp/search),
# RUN_ARGS (methods: more `autotune run` arguments, split on spaces).
set -uo pipefail
out=${OUTDIR:-${OUT:-gpu-search-out}}; mkdir -p "$out"
export PYTHONUNBUFFERED=1
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
data=${DATA:-/tmp/s8k}; work=${WORK:-/tmp/search}
[ -f "$data/.complete" ] || { python3 -m autotune synth "$data" --images 8000 --classes 100 > "$out/data.log" 2>&1 && touch "$data/.complete"; }
ttq=(python3 benchmarks/time_to_quality.py --tag h200 --dataset "$data" --work "$work")
time_attr() {  # the newest study's time attr in ./autotune.db, and where each trial's time went
  python3 "$root/benchmarks/trial_times.py" sqlite:///autotune.db
}
[ -d "$work" ] || [ ! -d gpu-work ] || cp -r gpu-work "$work"
root=$PWD
stages=${STAGE:-default}
for stage in ${stages//,/ }; do
case "$stage" in
default)
  for r in 1 2; do
    mkdir -p "/tmp/default$r" && cd "/tmp/default$r" || exit 1
    /usr/bin/time -f "wall %e s" python3 -m autotune run --dataset "$data" --no-report > "$out/default-run$r.log" 2>&1
    time_attr >> "$out/default-run$r.log" 2>&1
    cd "$root" || exit 1
  done
  ;;
grid)
  "${ttq[@]}" --grid-wide --stages grid --time-budget 480 > "$out/grid.log" 2>&1; echo "exit $?" >> "$out/grid.log"
  ;;
methods)
  # RUN_ARGS: more `autotune run` arguments for every run (e.g. RUN_ARGS="--window 0.35"), to set a changed default
  # beside the default in the same machine's runs (the methods and their compare in a WORK of their own)
  "${ttq[@]}" --methods autotune --seed 1 --seeds 3 --stages methods ${RUN_ARGS:+-- $RUN_ARGS} > "$out/methods.log" 2>&1; echo "exit $?" >> "$out/methods.log"
  dbs=("$work"/methods/autotune-seed*.db); python3 benchmarks/trial_times.py "${dbs[@]/#/sqlite:///}" > "$out/trials.log" 2>&1
  ;;
compare)
  cp benchmarks/results/h200-search.json "$out/h200-search.json" 2>/dev/null || true
  "${ttq[@]}" --grid-top 8 --rounds 3 --stages compare --json "$work/ttq.json" --results "$work/RESULTS.md" \
    --search-json "$out/h200-search.json" > "$out/compare.log" 2>&1; echo "exit $?" >> "$out/compare.log"
  cp "$work/ttq.json" "$out/" 2>/dev/null || true
  ;;
ahead)
  for seed in 1 2; do
    for mode in off on; do
      mkdir -p "/tmp/ahead-$mode-$seed" && cd "/tmp/ahead-$mode-$seed" || exit 1
      echo "== --build-ahead $mode --seed $seed" >> "$out/ahead.log"
      /usr/bin/time -f "wall %e s" python3 -m autotune run --dataset "$data" --no-report --seed "$seed" --build-ahead "$mode" 2>&1 \
        | tail -n 6 >> "$out/ahead.log"
      time_attr >> "$out/ahead.log" 2>&1
      cd "$root" || exit 1
    done
  done
  ;;
noise)
  usual='{"backend": "dali", "batch_size": 128, "dali_device": "gpu", "num_threads": 8, "prefetch_queue_depth": 2, "hw_decoder_load": 0.65}'
  best='{"backend": "dali", "batch_size": 256, "dali_device": "gpu", "num_threads": 12, "prefetch_queue_depth": 2, "hw_decoder_load": 0.75}'
  python3 benchmarks/paired_noise.py --dataset "$data" --device cuda --a "$usual" --b "$best" --processes 5 --rounds 6 --null \
    --out "$out/noise.json" > "$out/noise.log" 2>&1; echo "exit $?" >> "$out/noise.log"
  ;;
imports)  # where the first trial's wait for the trials' pre-imported process goes: three fresh processes, each import timed
  for r in 1 2 3; do
    python3 -c 'import time; t = [time.perf_counter()]
import numpy, torch; t.append(time.perf_counter())
import torchvision, torchvision.transforms; t.append(time.perf_counter())
import autotune.trials.child, autotune.trials.measure, autotune.trials.rank_group; t.append(time.perf_counter())
import nvidia.dali.fn, nvidia.dali.plugin.pytorch; t.append(time.perf_counter())
print(" ".join(f"{n} {b - a:.2f} s" for n, a, b in zip(("torch", "torchvision", "autotune", "dali"), t, t[1:])))' >> "$out/imports.log" 2>&1
  done
  cat "$work"/reports/*/trials/zygote.log 2>/dev/null | grep "^ready in" >> "$out/imports.log"
  ;;
line)
  hw='{"backend": "dali", "batch_size": 256, "dali_device": "gpu", "num_threads": 4, "prefetch_queue_depth": 2, "hw_decoder_load": 1.0}'
  mixed='{"backend": "dali", "batch_size": 256, "dali_device": "gpu", "num_threads": 6, "prefetch_queue_depth": 2, "hw_decoder_load": 0.5}'
  taskset -c 0-7 python3 benchmarks/paired_noise.py --dataset "$data" --device cuda --a "$hw" --b "$mixed" --processes 5 --rounds 6 \
    --out "$out/line8.json" > "$out/line8.log" 2>&1; echo "exit $?" >> "$out/line8.log"
  ;;
build)
  python3 benchmarks/dali_build.py --dataset "$data" --device cuda --rounds ${BUILD_ROUNDS:-3} ${BUILD_ARGS:---parallel 2,3} --out "$out/dali-build.json" > "$out/dali-build.log" 2>&1
  echo "exit $?" >> "$out/dali-build.log"
  ;;
held)
  usual='{"backend": "dali", "batch_size": 128, "dali_device": "gpu", "num_threads": 8, "prefetch_queue_depth": 2, "hw_decoder_load": 0.65}'
  mixed='{"backend": "dali", "batch_size": 256, "dali_device": "gpu", "num_threads": 12, "prefetch_queue_depth": 2, "hw_decoder_load": 0.5}'
  cpu='{"backend": "dali", "batch_size": 128, "dali_device": "cpu", "num_threads": 8, "prefetch_queue_depth": 2}'
  python3 benchmarks/dali_build.py --dataset "$data" --device cuda --rounds 3 --held --rate-s 1 --config "usual=$usual" \
    --config "mixed=$mixed" --config "cpu decode=$cpu" --out "$out/held.json" > "$out/held.log" 2>&1; echo "exit $?" >> "$out/held.log"
  mkdir -p /tmp/held-run && cd /tmp/held-run || exit 1
  /usr/bin/time -f "wall %e s" python3 -m autotune run --dataset "$data" --no-report --seed 2 2>&1 | tail -n 6 >> "$out/held.log"
  time_attr >> "$out/held.log" 2>&1
  cd "$root" || exit 1
  ;;
cuda)
  python3 -m pytest -q -p no:cacheprovider -m cuda tests > "$out/cuda.log" 2>&1; echo "exit $?" >> "$out/cuda.log"
  ;;
*)
  echo "STAGE must name default, grid, methods, compare, noise, line, build, held, cuda, ahead or imports"; exit 2
  ;;
esac
[ ! -d "$work" ] || { rm -rf "$out/work"; cp -r "$work" "$out/work"; }
done
tail -n 12 "$out"/*.log
