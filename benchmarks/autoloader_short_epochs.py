"""AutoLoader on epochs of a batch or two: the figure its YAML writes against what the settled loop then gets.

    python benchmarks/autoloader_short_epochs.py DATASET [BUDGET_S] [EPOCHS] [DEVICE]

A tiny model (pool, linear; on DEVICE, default cpu) trains for EPOCHS epochs (default 40) through ``autotune.AutoLoader`` (batch 256,
``budget_s`` BUDGET_S, default 30) in a temporary folder; prints the YAML's ``samples_per_s`` and the samples per
second of the settled epochs (the first two after settling left out).
"""

import os
import sys
import tempfile
import time

import torch
import yaml

import autotune


def main() -> None:
    data = os.path.abspath(sys.argv[1])
    budget = float(sys.argv[2]) if len(sys.argv) > 2 else 30.0
    epochs = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    device = sys.argv[4] if len(sys.argv) > 4 else "cpu"
    os.chdir(tempfile.mkdtemp())
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(8), torch.nn.Flatten(), torch.nn.Linear(3 * 64, 5)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = autotune.AutoLoader(data, device=device, config="al.yaml", batch_size=256, budget_s=budget)
    times = []
    for _ in range(epochs):
        t0, n = time.perf_counter(), 0
        for images, labels in loader:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(images), labels % 5).backward()
            opt.step()
            n += len(labels)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append((loader.exploring, n, time.perf_counter() - t0))
    loader.close()
    settled = [(n, dt) for exploring, n, dt in times if not exploring][2:]
    cfg = yaml.safe_load(open("al.yaml"))
    print(f"YAML {cfg['result']['samples_per_s']:.0f} samples/s ({cfg['loader']}); settled loop "
          f"{sum(n for n, _ in settled) / sum(dt for _, dt in settled):.0f} samples/s over {len(settled)} epochs")


if __name__ == "__main__":
    main()
