import os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "pipelines"))
os.environ.setdefault("AUTOTUNE_BENCH_DATA", "/tmp/u1k")
import torch
from torch.utils.data import DataLoader
import albu

def cap(_):
    import cv2
    cv2.setNumThreads(1)

def many(_):
    import cv2
    cv2.setNumThreads(16)

def main(mode, workers, batch=32, secs=4.0):
    ds = albu.train_set()
    kw = dict(batch_size=batch, num_workers=workers, shuffle=True, persistent_workers=True, prefetch_factor=2, drop_last=True)
    if mode == "cap":
        kw["worker_init_fn"] = cap
    if mode == "many":
        kw["worker_init_fn"] = many
    dl = DataLoader(ds, **kw)
    n = 0; t0 = None
    while True:
        for i, (x, y) in enumerate(dl):
            if t0 is None and i >= workers * 2:
                t0 = time.perf_counter(); n = 0
            elif t0 is not None:
                n += x.shape[0]
                if time.perf_counter() - t0 > secs:
                    print(f"{mode} w={workers}: {n / (time.perf_counter() - t0):.1f}")
                    return
main(sys.argv[1], int(sys.argv[2]))
