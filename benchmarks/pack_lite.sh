#!/usr/bin/env bash
# The wheels the user pipelines (a)-(d) need on the GPU machine, without DALI: Optuna and its needs, timm,
# Albumentations, WebDataset and theirs (the list in gpu_user.sh's header), taken from .whl/part.* (made by
# ../shared/gpu/pack-wheels.sh with that list added) into one tar, .whl/lite.tar (about 58 MB), that travels in one call:
#   carry [".whl/lite.tar"], command: mkdir -p /tmp/lite && tar xf .whl/lite.tar -C /tmp/lite &&
#     python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/lite/*.whl && STAGE=... bash benchmarks/gpu_user.sh
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
stage=$(mktemp -d)
cat .whl/part.* | tar xf - -C "$stage" --wildcards 'optuna-*' 'alembic-*' 'sqlalchemy-*' 'colorlog-*' 'mako-*' 'albucore-*' \
  'albumentations-*' 'annotated_types-*' 'anyio-*' 'braceexpand-*' 'click-*' 'h11-*' 'hf_xet-*' 'httpcore2-*' 'httpx2-*' \
  'huggingface_hub-*' 'idna-*' 'packaging-*' 'pydantic-*' 'pydantic_core-*' 'safetensors-*' 'scipy-*' 'simsimd-*' 'stringzilla-*' \
  'timm-*' 'tqdm-*' 'truststore-*' 'typing_inspection-*' 'typing_extensions-*' 'webdataset-*'
(cd "$stage" && tar cf - *.whl) > .whl/lite.tar
rm -rf "$stage"
ls -la .whl/lite.tar
