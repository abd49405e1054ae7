# at f7f3776 on the 2-core CPU machine, after the fix for a stream measured whole (84322cf); data: python -m autotune synth /tmp/synth2k --images 2000 --classes 20
AUTOTUNE_BENCH_COMMIT=$(git rev-parse HEAD) python benchmarks/user_pipelines.py --pipelines d --data /tmp/synth2k --batch-size 32 --device cpu --work /tmp/user-cpu4 --json /tmp/cpu-d.json   # run.log; the tuning's lines: tune.log
python benchmarks/user_pipelines.py --merge /tmp/cpu-d.json && python benchmarks/user_pipelines.py --table
