# OpenCV's own threads in DataLoader workers, on the 2-core CPU machine (OpenCV sees 2 here): Albumentations pipeline (c)
# over /tmp/u1k (1,000 synthetic JPEGs of 356-492 px), 2 workers, batch 32, a 4 s window after warm-up, a fresh process
# each, 3 interleaved rounds. many: cv2.setNumThreads(16) in each worker (as under a cgroup quota that OpenCV does not
# read, on a 16-core machine), cap: cv2.setNumThreads(1), none: OpenCV's default. Output: cv2-threads.txt.
cd benchmarks/cpu-logs/2026-12-06-cv2-threads
for r in 1 2 3; do for m in many cap none; do AUTOTUNE_BENCH_DATA=/tmp/u1k python probe.py $m 2; done; done
