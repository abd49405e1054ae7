#!/usr/bin/env bash
# One H200 (16 cores), DALI and Optuna from wheels under /tmp/site; run from the repository root.
# Where the process-to-process spread of a DALI GPU config comes from: the machine's topology, then the same two
# configs in fresh processes, free to run on any core or bound to the GPU's own cores, interleaved, with the GPU's
# clocks and temperature after each process.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{
echo "== topology"
lscpu | grep -E "Model name|^CPU\(s\)|Thread|Core|Socket|NUMA"
nvidia-smi topo -m
BUS=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1 | tr A-Z a-z)
DEV=/sys/bus/pci/devices/${BUS: -12}
echo "gpu $BUS numa_node=$(cat $DEV/numa_node) local_cpulist=$(cat $DEV/local_cpulist)"
LOCAL=$(cat $DEV/local_cpulist)
ALL=$(python3 -c "import os; print(len(os.sched_getaffinity(0)))")
if [ "$(python3 -c "from benchmarks.window_ramp import cpu_list; print(len(cpu_list('$LOCAL')))")" = "$ALL" ]; then
  LOCAL=0-$((ALL / 2 - 1)); echo "one NUMA node: binding to half the cores instead, $LOCAL"
fi
nvidia-smi --query-gpu=clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw,clocks_throttle_reasons.active --format=csv
python3 -m autotune synth /tmp/s8k --images 8000 --classes 100 >/dev/null
for i in 1 2 3 4; do
  for cfg in "dali-gpu:b=256,t=4,q=2,hw=1" "dali-gpu:b=128,t=8,q=2,hw=0.65"; do
    for cpus in all "$LOCAL"; do
      extra=(); [ "$cpus" != all ] && extra=(--cpus "$cpus")
      python3 benchmarks/window_ramp.py --dataset /tmp/s8k --device cuda --config "$cfg" --windows 12 --repeats 1 \
        "${extra[@]}" --out "$OUT/ramp-$i-$(echo "${cfg%%,q*}-$cpus" | tr -c "a-z0-9\n" _).json" | sed "s/^/[$i] /"
      nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader | sed "s/^/[$i]   gpu after: /"
    done
  done
done
} 2>&1 | tee $OUT/log.txt
