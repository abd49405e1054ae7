"""Model in the loop: score a loader by the training samples/s it sustains, not by its own speed.

A trial's child builds the model once (:func:`prepare_consumer`), and :func:`autotune.trials.measure.measure` runs one
training step (forward, backward, optimizer step) on each batch inside the clock. Or the model is simulated:
``--step-ms`` makes each step take a fixed time. The model's *ceiling* is the same steps on one batch already
resident on the device, measured once per study in a child like any trial (:func:`measure_ceiling`); each
trial is recorded as a fraction of it (:func:`ceiling_attrs`). Once the model is the bottleneck, many loaders
reach the same rate: the "enough" rule (:func:`choose_enough`) picks, among configs within a tolerance of the
best training rate, the one with the fewest CPU threads, then the least memory.

The parent side (spec, ceiling bookkeeping, selection) imports neither torch nor torchvision; the child side
and :func:`estimate_gpu_mib`'s fallback import them inside the functions.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from autotune.errors import UserError

if TYPE_CHECKING:
    import argparse

    from autotune.loaders.presets import Preset

logger = logging.getLogger(__name__)

MiB = 2**20
#: classes of the model's head when the dataset's are not known (estimates)
DEFAULT_CLASSES = 1000
#: optimizer state per parameter: weight, gradient, SGD momentum (fp32 each)
_PARAM_COPIES = 3
#: allocator slack over the traced tensors (fragmentation, cuDNN workspaces)
_SLACK = 1.25


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """The model whose training steps score a trial; picklable, it travels to the child in the TrialSpec.

    Either ``name`` (a torchvision classification model, random weights) or ``step_ms`` (a simulated model
    whose every step takes that long). ``resident`` is set on the ceiling's spec only: the child then trains on
    one device-resident batch instead of building a loader. ``gpu_mib`` holds (batch size, MiB) pairs measured
    by the ceiling, which :func:`estimate_gpu_mib` prefers to its analytic estimate.
    """

    name: str | None = None
    amp: bool = False
    channels_last: bool = False
    step_ms: float | None = None
    lr: float = 0.01
    resident: bool = False
    gpu_mib: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        if (self.name is None) == (self.step_ms is None):
            raise UserError(f"a model is either --model NAME or --step-ms MS, but got model={self.name!r}, step_ms={self.step_ms!r}")
        if self.step_ms is not None and self.step_ms <= 0:
            raise UserError(f"--step-ms must be greater than 0, but got {self.step_ms}")
        if self.step_ms is not None and (self.amp or self.channels_last):
            raise UserError("--amp and --channels-last apply to --model only; drop them with --step-ms")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ModelSpec:
        """From ``autotune run``'s flags; also checks ``--tolerance``."""
        tol = getattr(args, "tolerance", 0.02)
        if not 0 <= tol < 1:
            raise UserError(f"--tolerance must be a fraction between 0 and 1 (0.02 = 2 %), but got {tol}")
        if args.model and args.step_ms:
            raise UserError("pass --model NAME or --step-ms MS, not both")
        return cls(name=args.model or None, amp=bool(args.amp), channels_last=bool(args.channels_last), step_ms=args.step_ms)

    def describe(self) -> str:
        """E.g. ``resnet50 bf16 channels_last`` or ``simulated 150 ms/step``."""
        if self.step_ms is not None:
            return f"simulated {self.step_ms:g} ms/step"
        return " ".join([self.name or "", *(["bf16"] if self.amp else []), *(["channels_last"] if self.channels_last else [])])


# ------------------------------------------------------------------------------------------ child side
def _sleep_until(deadline: float) -> None:
    """Sleep to within ~1 ms of ``deadline``, then spin: a precise wait that leaves the CPU to the loader."""
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            return
        if left > 0.002:
            time.sleep(left - 0.0015)


def build_model(spec: ModelSpec, num_classes: int = DEFAULT_CLASSES, device: Any = "cpu") -> Any:
    """The torchvision model with random weights (no download), on ``device``."""
    import torchvision

    names = torchvision.models.list_models(module=torchvision.models)
    if spec.name not in names:
        raise ValueError(f"--model must be a torchvision classification model such as resnet18, resnet50, vit_b_16, but got {spec.name!r}")
    return torchvision.models.get_model(spec.name, weights=None, num_classes=num_classes).to(device)


def prepare_consumer(
    spec: ModelSpec, batch_size: int, device: str, preset: Preset, num_classes: int | None = None
) -> tuple[Callable[[Any], None], dict[str, Any]]:
    """Build the model once and return ``(consume, extra)``: one training step per batch, and attrs for the result.

    ``consume((images, labels))`` runs forward (bf16 autocast on CUDA with ``amp``), cross-entropy, backward and
    an SGD step. On the ceiling's child (``spec.resident``) on CUDA, ``extra["model_gpu_mib"]`` is updated with the
    process's peak reserved memory over the first steps: the model's footprint at this batch size.
    """
    extra: dict[str, Any] = {"model": spec.describe()}
    if spec.step_ms is not None:
        step_s = spec.step_ms / 1000.0

        def simulated(batch: Any) -> None:
            _sleep_until(time.perf_counter() + step_s)

        return simulated, extra

    import torch
    import torch.nn.functional as F

    dev = torch.device(device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = True
    model = build_model(spec, num_classes or DEFAULT_CLASSES, dev)
    fmt = torch.channels_last if spec.channels_last else torch.contiguous_format
    if spec.channels_last:
        model = model.to(memory_format=fmt)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=0.9)
    amp = spec.amp and cuda
    track = {"steps": 0}

    def step(batch: Any) -> None:
        images, labels = batch
        images = images.to(dev, non_blocking=True, memory_format=fmt)
        labels = labels.to(dev, non_blocking=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
            loss = F.cross_entropy(model(images), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if cuda and spec.resident and track["steps"] < 5:
            track["steps"] += 1
            torch.cuda.synchronize(dev)
            extra["model_gpu_mib"] = round(torch.cuda.max_memory_reserved(dev) / MiB, 1)

    return step, extra


class ResidentBatch:
    """A "loader" that yields one synthetic batch, already on the device, forever: what the ceiling trains on."""

    def __init__(self, batch_size: int, preset: Preset, device: str, num_classes: int = DEFAULT_CLASSES, seed: int | None = None) -> None:
        import torch

        g = torch.Generator().manual_seed(seed or 0)
        self.device = device
        images = torch.randn(batch_size, 3, preset.crop, preset.crop, generator=g)
        labels = torch.randint(0, max(1, num_classes), (batch_size,), generator=g)
        self.batch: tuple[Any, Any] | None = (images.to(device), labels.to(device))

    def __iter__(self) -> Iterator[Any]:
        while True:
            yield self.batch

    def __len__(self) -> int:
        return 1

    def close(self) -> None:
        self.batch = None


def resident_loader(spec: Any) -> ResidentBatch:
    """The ceiling child's loader for a :class:`autotune.trials.spec.TrialSpec` whose model is ``resident``."""
    from autotune.loaders.presets import get_preset

    return ResidentBatch(spec.loader.batch_size, get_preset(spec.pipeline), spec.device, len(spec.dataset.classes), spec.seed)


# ---------------------------------------------------------------------------------------- memory term
@functools.lru_cache(maxsize=64)
def _traced_mib(name: str, amp: bool, batch_size: int, crop: int, num_classes: int) -> float:
    """Parameters x3 (weights, gradients, momentum) + the activations a forward pass keeps, traced on the
    meta device (no memory, no compute)."""
    import torch

    with torch.device("meta"):
        model = build_model(ModelSpec(name=name), num_classes, "meta")
        params = sum(p.numel() * p.element_size() for p in model.parameters())
        acts = 0

        def hook(module: Any, inputs: Any, output: Any) -> None:
            nonlocal acts
            for t in output if isinstance(output, (tuple, list)) else (output,):
                if isinstance(t, torch.Tensor):
                    acts += t.numel() * (2 if amp else t.element_size())

        leaves = [m for m in model.modules() if not list(m.children())]
        handles = [m.register_forward_hook(hook) for m in leaves]
        try:
            x = torch.empty(batch_size, 3, crop, crop)
            model.train()(x)
        finally:
            for h in handles:
                h.remove()
    data = batch_size * 3 * crop * crop * 4
    return (params * _PARAM_COPIES + acts * _SLACK + data) / MiB


def estimate_gpu_mib(spec: ModelSpec | None, batch_size: int, *, crop: int = 224, num_classes: int = DEFAULT_CLASSES) -> float:
    """The model's GPU memory at ``batch_size``, in MiB: the term the memory guard adds to a loader's estimate.

    A simulated model (``--step-ms``) needs none. Once the ceiling has measured the real footprint
    (``spec.gpu_mib``), that is used, interpolated linearly in the batch size (fixed part + per-sample part);
    before, an analytic estimate: parameters, gradients and momentum, plus the activations of one forward
    pass traced on torch's meta device (bf16 with ``amp``), plus the input batch. At the one batch size the
    ceiling measured (a fixed ``--batch-size``), that measurement, with no trace: tracing imports torch (about
    6 s in the tuner's process, of a 60 s budget), which only a ceiling measured at one batch size of several needs.
    """
    if spec is None or spec.name is None:  # a simulated model: ModelSpec has either a name or a step_ms
        return 0.0
    points = sorted(spec.gpu_mib)
    if len(points) >= 2:
        pairs = list(zip(points, points[1:], strict=False))
        (b0, m0), (b1, m1) = next((p for p in pairs if batch_size <= p[1][0]), pairs[-1])
        return max(0.0, m0 + (m1 - m0) / (b1 - b0) * (batch_size - b0))
    if len(points) == 1 and batch_size == points[0][0]:
        return points[0][1]
    traced = _traced_mib(spec.name, spec.amp, batch_size, crop, num_classes)
    if points:
        b0, m0 = points[0]
        return traced * m0 / _traced_mib(spec.name, spec.amp, b0, crop, num_classes)
    return traced
