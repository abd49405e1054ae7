# at eea19a8, one H200 machine per call list (AUTOTUNE_BENCH_COMMIT=eea19a871eb8c473e237395d9edce5e85952bc07; PYTHONPATH=/tmp/site:$PWD),
# Optuna and the pipelines' wheels (timm, Albumentations, WebDataset and their needs, no DALI) carried as one tar
# and installed into /tmp/site. The first machine was taken back during the first of these calls (nothing came back).
# On a second machine:
OUTDIR=$OUT/u1 WINDOW=3 STAGE=shm PIPES=c bash benchmarks/gpu_user.sh    # shm-c.log: (c) under a 64 MiB /dev/shm
OUTDIR=$OUT/u1 WINDOW=3 STAGE=cpus PIPES=a bash benchmarks/gpu_user.sh   # cpus-a-cut-off.log: the call's 580 s ended it in round 2; no row
OUTDIR=$OUT/u2 WINDOW=2 STAGE=cpus PIPES=a bash benchmarks/gpu_user.sh   # cpus-a.log: (a) under a cgroup v2 cpu.max of 4 CPUs
# back here:
#   python benchmarks/user_pipelines.py --merge u1/user-pipelines.json && python benchmarks/user_pipelines.py --merge u2/user-pipelines.json
#   python benchmarks/user_pipelines.py --table
