#!/usr/bin/env bash
# The user's own pipelines on the H200 (benchmarks/user_pipelines.py), in stages of one call each, every pipeline's rows
# appended to $OUT/user-pipelines.json (or OUTDIR) as soon as it is done; the stage's log beside them, and the
# tunings' own logs and studies in tune.tgz. Run as root from the repository's root, e.g. `STAGE=none PIPES=a,b bash
# benchmarks/gpu_user.sh` (its own output to a file outside OUTDIR: the stage's log there has the stage's name); back here:
#   python benchmarks/user_pipelines.py --merge OUT/user-pipelines.json && python benchmarks/user_pipelines.py --table
#
# Stages (each pipeline: a 60 s `autotune run`, then 6 peers of a Dataset (5 of a DALI function) x 3 rounds of 4 s
# windows, about 4 minutes):
#  none: limit none, the pipelines in PIPES (default a,b,c,d,e: about 20 minutes; within one call of under nine
#        minutes, run it three times: PIPES=a,b, PIPES=c,d, PIPES=e)
#  shm:  /dev/shm remounted at 64 MiB (`mount -o remount,size=64m /dev/shm`, the old size put back on exit), PIPES
#        (default a,c; one pipeline a call keeps it well under nine minutes), rows with --limit shm64m
#  cpus: four cores: a cgroup v2 child of /sys/fs/cgroup with cpu.max "400000 100000" holding this shell, or, where
#        cgroups cannot be written, `taskset -c 0-3`; PIPES (default a,c), rows with --limit cpus4 and limit_how saying
#        which, and how many threads OpenCV starts there. CGNS=1 runs the pipelines in a cgroup namespace of their own,
#        /sys/fs/cgroup remounted, as a container sees its quota
# Env: DATA (default /tmp/u4k, 4,000 synthetic images, written when missing: about 30 s), ROUNDS (3), WINDOW (4),
# BUDGET (60), BATCH (256), WHEELS (a folder of the wheels below: installed into /tmp/site when timm is missing).
#
# The wheels for timm, Albumentations and WebDataset (Python 3.12, manylinux x86_64), beyond torch and its own
# dependencies, torchvision, numpy, pillow, opencv and pyyaml; fetched with
#   pip download --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 --no-deps -d WHEELS \
#     albucore==0.0.24 albumentations==2.0.8 annotated-types==0.7.0 anyio==4.16.0 braceexpand==0.1.7 click==8.5.1 \
#     h11==0.16.0 hf-xet==1.8.0 httpcore2==2.16.2 httpx2==2.16.2 huggingface_hub==2.4.0 idna==3.20 packaging==26.2 \
#     pydantic==2.13.4 pydantic_core==2.46.4 safetensors==0.8.0 scipy==1.16.3 simsimd==6.5.16 stringzilla==5.3.2 \
#     timm==1.0.31 tqdm==4.70.1 truststore==0.10.5 typing-inspection==0.4.2 typing_extensions==4.16.0 webdataset==1.0.2
# (25 wheels, about 51 MB; every Requires-Dist among them is met by the list or by what the machine has.)
#
# Pipelines a-d need no DALI: Optuna (optuna, alembic, sqlalchemy, colorlog, mako) and the wheels above, 30 wheels and
# 58 MB in one tar (`bash benchmarks/pack_lite.sh` writes .whl/lite.tar), travel in one call with the stage (`mkdir -p
# /tmp/lite && tar xf .whl/lite.tar -C /tmp/lite && pip install --no-index --no-deps --target /tmp/site /tmp/lite/*.whl`);
# e needs DALI's wheels as well. A fresh machine writes DATA first (about 40 s on 16 cores).
# Set AUTOTUNE_BENCH_COMMIT to the commit the tree was sent at: a copy's .git can name an older one.
set -uo pipefail
out=${OUTDIR:-${OUT:-gpu-user-out}}; mkdir -p "$out"
export PYTHONUNBUFFERED=1
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
data=${DATA:-/tmp/u4k}; rounds=${ROUNDS:-3}; window=${WINDOW:-4}; budget=${BUDGET:-60}; batch=${BATCH:-256}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -o 'H[0-9]\{3\}' || echo GPU)
machine="1 x ${gpu}, $(nproc) cores"  # the card this call got: a kind may be served by an H100 or an H200
if ! python3 -c "import timm, albumentations, webdataset" 2>/dev/null && [ -n "${WHEELS:-}" ]; then
  python3 -m pip install --quiet --no-index --no-deps --target /tmp/site "$WHEELS"/*.whl > "$out/wheels.log" 2>&1
fi
[ -f "$data/.complete" ] || { python3 -m autotune synth "$data" --images 4000 --classes 100 > "$out/data.log" 2>&1 && touch "$data/.complete"; sync; }
bench=(python3 benchmarks/user_pipelines.py --data "$data" --batch-size "$batch" --device cuda --rounds "$rounds" --window "$window"
       --budget "$budget" --machine "$machine" --work /tmp/user-bench --json "$out/user-pipelines.json")
estimate() {  # pipelines x (tuning + peers x rounds x (start-up + window)), as user_pipelines.py prints it
  local n; n=$(($(echo "$1" | tr ',' '\n' | wc -l)))
  echo "stage ${STAGE:-none}: pipelines $1, about $(( n * ((budget + 20) + rounds * 5 * (6 + ${window%.*})) / 60 )) minutes"
}
case "${STAGE:-none}" in
none)
  pipes=${PIPES:-a,b,c,d,e}; estimate "$pipes"
  "${bench[@]}" --pipelines "$pipes" --limit none > "$out/none-${pipes//,/}.log" 2>&1
  ;;
shm)
  old=$(findmnt -no OPTIONS /dev/shm | tr ',' '\n' | sed -n 's/^size=//p' | head -1)  # a /dev/shm mounted twice lists twice
  old=${old:-$(df -k --output=size /dev/shm | tail -1 | tr -d ' ')k}
  trap 'mount -o remount,size="$old" /dev/shm; df -h /dev/shm' EXIT
  mount -o remount,size=64m /dev/shm || { echo "cannot remount /dev/shm" | tee "$out/shm.log"; exit 1; }
  pipes=${PIPES:-a,c}; df -h /dev/shm; estimate "$pipes"
  "${bench[@]}" --pipelines "$pipes" --limit shm64m --limit-how "mount -o remount,size=64m /dev/shm (was $old)" > "$out/shm.log" 2>&1
  ;;
cpus)
  cg=/sys/fs/cgroup/autotune-bench-cpus4; run=("${bench[@]}")
  if mkdir -p "$cg" 2>/dev/null && { [ -f "$cg/cpu.max" ] || echo +cpu > /sys/fs/cgroup/cgroup.subtree_control; } 2>/dev/null \
     && [ -f "$cg/cpu.max" ] && echo "400000 100000" > "$cg/cpu.max" && echo $$ > "$cg/cgroup.procs"; then
    how="cgroup v2 $cg/cpu.max 400000 100000"
  else
    how="taskset -c 0-3 (cgroups not writable here)"; run=(taskset -c 0-3 "${bench[@]}")
  fi
  if [ "${CGNS:-0}" = 1 ] && [ "${how#cgroup}" != "$how" ]; then
    # as a container sees its quota: its own cgroup namespace, /sys/fs/cgroup remounted, cpu.max at its root (without
    # this, a library that reads /sys/fs/cgroup/cpu.max, OpenCV's thread count among them, sees the machine's cores)
    run=(unshare --cgroup --mount --propagation private sh -c 'mount -t cgroup2 cgroup2 /sys/fs/cgroup && exec "$@"' sh "${bench[@]}")
    how="$how, in a cgroup namespace of its own (/sys/fs/cgroup remounted, as in a container)"
  fi
  prefix=("${run[@]:0:$(( ${#run[@]} - ${#bench[@]} ))}")
  seen=$("${prefix[@]}" python3 -c "from autotune.config.fingerprint import usable_cpus; print(usable_cpus())")
  cv=$("${prefix[@]}" python3 -c "import cv2; print(cv2.getNumberOfCPUs())" 2>/dev/null || echo "none")
  pipes=${PIPES:-a,c}; how="$how; autotune's usable cores: $seen; OpenCV's threads: $cv"; echo "$how"; estimate "$pipes"
  "${run[@]}" --pipelines "$pipes" --limit cpus4 --limit-how "$how" > "$out/cpus.log" 2>&1
  ;;
*)
  echo "STAGE must be none, shm or cpus"; exit 2
  ;;
esac
# each tuning's own lines (its trials) and every tuning's trials with where their seconds went (autotune show), as one
# file: the machine's /tmp goes with it, and a call brings back at most 8 files (a JSON beside more was lost)
(cd /tmp/user-bench && tar czf "$out/tune.tgz" ./*-tune.log studies.db 2>/dev/null)
tail -n 3 /tmp/user-bench/*-tune.log "$out"/*.log; ls -la "$out"
