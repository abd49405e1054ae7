"""Pipeline (e): a DALI pipeline function of the user's kind (``@pipeline_def``): file reader, image decoder (``mixed``
on a GPU, ``cpu`` without one), random resized crop, TrivialAugment Wide where the installed DALI has
``nvidia.dali.auto_aug``, and crop_mirror_normalize with a random flip.

autotune calls it with ``device_id=None`` on a machine without a GPU (DALI's CPU-only mode: every operator on the
CPU) and with the GPU's index on one; ``hw_decoder_load`` is passed to the mixed decoder.

    autotune run --dataset benchmarks/pipelines/dali_pipe.py:train_pipe --batch-size 256 --device cuda
"""

from __future__ import annotations

from typing import Any

from _bench_images import MEAN, SIZE, STD, data_dir
from nvidia.dali import fn, pipeline_def, types
from nvidia.dali.pipeline import Pipeline

try:
    from nvidia.dali.auto_aug import trivial_augment
except ImportError:  # an older DALI: the pipeline without it
    trivial_augment = None


@pipeline_def(enable_conditionals=trivial_augment is not None)
def train_pipe(hw_decoder_load: float = 0.65) -> Any:
    gpu = Pipeline.current().device_id is not None
    jpegs, labels = fn.readers.file(file_root=str(data_dir()), random_shuffle=True, name="Reader")
    if gpu:
        images = fn.decoders.image(jpegs, device="mixed", output_type=types.RGB, hw_decoder_load=hw_decoder_load)
    else:
        images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    images = fn.random_resized_crop(images, size=[SIZE, SIZE])
    if trivial_augment is not None:
        images = trivial_augment.trivial_augment_wide(images)
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", mirror=fn.random.coin_flip(),
                                      mean=[m * 255 for m in MEAN], std=[s * 255 for s in STD])
    return images, (labels.gpu() if gpu else labels)


train_pipe.output_map = ["images", "labels"]  # the iterator's output names, read by autotune
