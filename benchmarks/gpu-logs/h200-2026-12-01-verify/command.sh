#!/usr/bin/env bash
# One H200: the CUDA tests; build_loader on cuda, and the device checks (cuda:1 on a one-GPU machine, a bare number)
# for build_loader and AutoLoader; a 30 s default run on 2,000 synthetic JPEGs.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{
python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 | tail -1
python3 -m autotune synth /tmp/s2k --images 2000 --classes 10 >/dev/null
python3 - <<'PY'
import warnings, autotune
warnings.simplefilter("ignore")
from autotune.config.schema import Config, LoaderConfig
cfg = Config(loader=LoaderConfig.from_params({"backend": "dali", "batch_size": 64, "dali_device": "gpu", "num_threads": 4, "hw_decoder_load": 1.0}), device="cuda")
l = autotune.build_loader("/tmp/s2k", cfg); x, y = next(iter(l)); print("build_loader cuda:", tuple(x.shape), x.device)
for d in ["cuda:1", 0]:
    try: autotune.build_loader("/tmp/s2k", cfg, device=d)
    except Exception as e: print(type(e).__name__, e)
try: autotune.AutoLoader("/tmp/s2k", batch_size=64, device="cuda:1", config="/tmp/al.yaml")
except Exception as e: print(type(e).__name__, e)
PY
cd /tmp && mkdir -p run30 && cd run30 && python3 -m autotune run --dataset /tmp/s2k --budget 30 2>&1 | grep -v "^trial\|^re-meas" | tail -6
grep -E "dali_heuristic|speedup" autotune.yaml
} 2>&1 | tee $OUT/verify.log
