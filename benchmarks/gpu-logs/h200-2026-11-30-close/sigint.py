"""Ctrl-C an AutoLoader training loop while it explores; how long until it stops, and whether the YAML is written.

    python sigint.py DATASET DEVICE OUT_DIR SECONDS [SECONDS ...]
"""
import os, signal, subprocess, sys, time

TRAIN = r'''
import sys, torch, autotune
data, device, out = sys.argv[1:4]
model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, stride=4), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 100)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = autotune.AutoLoader(data, device=device, config=out, budget_s=120)
for epoch in range(1000):
    for images, labels in loader:
        opt.zero_grad(); torch.nn.functional.cross_entropy(model(images), labels).backward(); opt.step()
'''

data, device, out_dir = sys.argv[1:4]
for s in map(float, sys.argv[4:]):
    out = os.path.join(out_dir, f"sigint-{s:g}.yaml")
    p = subprocess.Popen([sys.executable, "-c", TRAIN, data, device, out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(s)
    p.send_signal(signal.SIGINT)
    t0 = time.time()
    try:
        text, _ = p.communicate(timeout=60)
        took = f"stopped {time.time() - t0:.1f} s after SIGINT, exit {p.returncode}"
    except subprocess.TimeoutExpired:
        p.kill(); text, _ = p.communicate()
        took = "still running 60 s after SIGINT (killed)"
    lines = [ln for ln in text.splitlines() if "KeyboardInterrupt" in ln or "Exception ignored" in ln or "wrote" in ln]
    print(f"SIGINT at {s:g} s: {took}; YAML {'written' if os.path.exists(out) else 'not written'}; " + " | ".join(lines[-3:]), flush=True)
