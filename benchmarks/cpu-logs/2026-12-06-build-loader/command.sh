# (c) Albumentations on the 2-core CPU machine (OpenCV sees 2 cores), the tuned config read through
# autotune.build_loader (each worker's OpenCV capped at 1 thread here) and its keywords in a plain DataLoader beside it;
# rows merged into benchmarks/results/user-pipelines.json
python benchmarks/user_pipelines.py --pipelines c --data /tmp/synth2k --batch-size 32 --device cpu --work /tmp/ucpu --json /tmp/ucpu/rows.json > run.log
python benchmarks/user_pipelines.py --merge /tmp/ucpu/rows.json && python benchmarks/user_pipelines.py --table
