"""Model in the loop: score a loader by the training samples/s it sustains, not by its own speed.

A trial's child builds the model once (:func:`prepare_consumer`), and :func:`autotune.measure.measure` runs one
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

    import optuna

    from autotune.presets import Preset
    from autotune.study import Tuner

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


def prepare_consumer(spec: ModelSpec, batch_size: int, device: str, preset: Preset, num_classes: int | None = None) -> tuple[Callable[[Any], None], dict[str, Any]]:
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
        self.batch = (images.to(device), labels.to(device))

    def __iter__(self) -> Iterator[Any]:
        while True:
            yield self.batch

    def __len__(self) -> int:
        return 1

    def close(self) -> None:
        self.batch = None  # type: ignore[assignment]


def resident_loader(spec: Any) -> ResidentBatch:
    """The ceiling child's loader for a :class:`autotune.runner.TrialSpec` whose model is ``resident``."""
    from autotune.presets import get_preset

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
    pass traced on torch's meta device (bf16 with ``amp``), plus the input batch.
    """
    if spec is None or spec.step_ms is not None:
        return 0.0
    points = sorted(spec.gpu_mib)
    if len(points) >= 2:
        pairs = list(zip(points, points[1:]))
        (b0, m0), (b1, m1) = next((p for p in pairs if batch_size <= p[1][0]), pairs[-1])
        return max(0.0, m0 + (m1 - m0) / (b1 - b0) * (batch_size - b0))
    traced = _traced_mib(spec.name, spec.amp, batch_size, crop, num_classes)  # type: ignore[arg-type]
    if points:
        b0, m0 = points[0]
        return traced * m0 / _traced_mib(spec.name, spec.amp, b0, crop, num_classes)  # type: ignore[arg-type]
    return traced


# ------------------------------------------------------------------------------------------- ceiling
def ceiling_batch_sizes(space: Any) -> list[int]:
    """The batch sizes a study can try: each choice, or the ends of an int range."""
    p = space["batch_size"]
    if p.kind == "choices":
        return sorted({int(c) for c in p.choices})
    return sorted({int(p.low), int(p.high)})


def measure_ceiling(tuner: Tuner) -> dict[str, Any]:
    """The model's training samples/s on one device-resident batch, at each batch size the space allows.

    Each batch size runs in a spawned child like a trial (same windows, budgets and timeout). The measured
    GPU footprints are put on ``tuner.settings.model`` so that later memory estimates use them.

    Returns:
        The record stored as the study attr ``model_ceiling``: ``model``, ``per_batch_size`` (rate, spread,
        outcome, model_gpu_mib per batch size), ``samples_per_s`` and ``batch_size`` of the best.

    Raises:
        UserError: no batch size completed because the model cannot be built (e.g. an unknown name).
    """
    from autotune.config import LoaderConfig
    from autotune.outcomes import Outcome
    from autotune.runner import run_trial

    s = tuner.settings
    model = dataclasses.replace(s.model, resident=True)
    per: dict[str, dict[str, Any]] = {}
    measured: list[tuple[int, float]] = []
    for b in ceiling_batch_sizes(tuner.space):
        spec = dataclasses.replace(tuner.spec(LoaderConfig.from_params({"backend": "torch", "batch_size": b})), model=model, ranks=1, inject=None)
        r = run_trial(spec, timeout_s=s.trial_timeout, budgets=s.budgets)
        row: dict[str, Any] = {"outcome": r.outcome.value}
        if r.outcome is Outcome.COMPLETE and r.samples_per_s:
            row.update(samples_per_s=round(r.samples_per_s, 1), spread=[round(x, 1) for x in r.spread or ()])
            if "model_gpu_mib" in r.extra:
                row["model_gpu_mib"] = r.extra["model_gpu_mib"]
                measured.append((b, float(r.extra["model_gpu_mib"])))
        else:
            row["message"] = r.message[:300]
        per[str(b)] = row
        logger.info("model ceiling at batch %d: %s", b, row)
    done = {int(b): v["samples_per_s"] for b, v in per.items() if "samples_per_s" in v}
    if not done:
        first = next(iter(per.values()))
        if first["outcome"] == Outcome.CRASH.value:
            raise UserError(f"the model {model.describe()!r} could not be trained: {first.get('message', '')}")
    if measured:
        tuner.settings.model = dataclasses.replace(s.model, gpu_mib=tuple(measured))
    best_b = max(done, key=done.get) if done else None  # type: ignore[arg-type]
    return {
        "model": s.model.describe(),
        "method": "the same training steps on one batch resident on the device",
        "per_batch_size": per,
        "samples_per_s": done.get(best_b) if best_b else None,
        "batch_size": best_b,
    }


def ceiling_at(ceiling: dict[str, Any] | None, batch_size: int) -> float | None:
    """The ceiling at ``batch_size`` (the nearest measured batch size when that one was not)."""
    if not ceiling:
        return None
    done = {int(b): v["samples_per_s"] for b, v in ceiling.get("per_batch_size", {}).items() if v.get("samples_per_s")}
    if not done:
        return None
    return done.get(batch_size) or done[min(done, key=lambda b: abs(b - batch_size))]


def ceiling_attrs(ceiling: dict[str, Any] | None, batch_size: int, samples_per_s: float | None) -> dict[str, Any]:
    """A trial's ``model_ceiling_samples_per_s`` and ``fraction_of_ceiling`` (at its batch size)."""
    c = ceiling_at(ceiling, batch_size)
    if not c or not samples_per_s:
        return {}
    return {"model_ceiling_samples_per_s": round(c, 1), "fraction_of_ceiling": round(samples_per_s / c, 3)}


# ----------------------------------------------------------------------------------------- selection
def loader_threads(params: dict[str, Any]) -> int:
    """CPU threads/processes a config spends on loading: torch ``num_workers``; DALI ``num_threads`` (GPU decode too)."""
    if params.get("backend", "torch") == "dali":
        return int(params.get("num_threads", 2))
    return int(params.get("num_workers", 0))


def trial_rates(study: optuna.Study) -> dict[int, float]:
    """Each complete trial's training rate: the confirmation's median where it was re-measured, else its score."""
    import optuna

    conf = study.user_attrs.get("confirmation") or {}
    medians = {c["trial"]: float(c["median"]) for c in conf.get("candidates", [])}
    return {
        t.number: medians.get(t.number, float(t.value))
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        if t.value is not None and t.user_attrs.get("loader")
    }


def _cost(t: optuna.trial.FrozenTrial, rate: float) -> tuple[float, float, float, float]:
    a = t.user_attrs
    return (loader_threads(a["loader"]), a.get("peak_host_mib") or float("inf"), a.get("peak_gpu_mib") or 0.0, -rate)


def choose_enough(study: optuna.Study, tolerance: float) -> dict[str, Any]:
    """The "enough" rule: among configs within ``tolerance`` of the best training rate, the fewest loader CPU
    threads, then the least peak host memory, then the least GPU memory.

    Records the choice in the study: the ``confirmation`` attr's ``winner_trial`` (what the YAML is written
    from) and ``result_extra["selection"]`` (the rule, the fastest and chosen rates, the headroom), plus the
    chosen config's ``fraction_of_ceiling``.

    Returns:
        The ``selection`` record.
    """
    if not 0 <= tolerance < 1:
        raise UserError(f"--tolerance must be a fraction between 0 and 1 (0.02 = 2 %), but got {tolerance}")
    rates = trial_rates(study)
    if not rates:
        raise UserError(f"study {study.study_name!r} has no complete trial to choose from")
    trials = {t.number: t for t in study.get_trials(deepcopy=False) if t.number in rates}
    fastest = max(rates, key=lambda n: (rates[n], -n))
    floor = rates[fastest] * (1 - tolerance)
    within = sorted(n for n, r in rates.items() if r >= floor)
    chosen = min(within, key=lambda n: (*_cost(trials[n], rates[n]), n))
    f, c = trials[fastest].user_attrs, trials[chosen].user_attrs
    cpus = (study.user_attrs.get("hardware") or {}).get("cpus")

    def saved(key: str) -> float | None:
        return round(f[key] - c[key], 1) if f.get(key) is not None and c.get(key) is not None else None

    selection: dict[str, Any] = {
        "rule": f"among configs within {tolerance:.0%} of the best training rate: fewest loader CPU threads "
                "(torch num_workers, DALI num_threads), then least peak host memory, then least GPU memory",
        "tolerance": tolerance,
        "fastest_trial": fastest,
        "fastest_config": f.get("config"),
        "fastest_samples_per_s": round(rates[fastest], 1),
        "chosen_trial": chosen,
        "chosen_config": c.get("config"),
        "chosen_samples_per_s": round(rates[chosen], 1),
        "within_tolerance": within,
        "headroom": {
            "cpu_workers_saved": loader_threads(f["loader"]) - loader_threads(c["loader"]),
            "host_mib_saved": saved("peak_host_mib"),
            "gpu_mib_saved": saved("peak_gpu_mib"),
            "cpu_threads_left": cpus - loader_threads(c["loader"]) if cpus else None,
        },
    }
    extra = dict(study.user_attrs.get("result_extra") or {})
    extra["selection"] = selection
    ceiling = study.user_attrs.get("model_ceiling")
    if ceiling:
        extra["model"] = ceiling.get("model")
        extra.update(ceiling_attrs(ceiling, int(c["loader"]["batch_size"]), rates[chosen]))
        if "fraction_of_ceiling" in extra:
            selection["headroom"]["model_bound"] = extra["fraction_of_ceiling"] >= 1 - tolerance
    study.set_user_attr("result_extra", extra)
    conf = dict(study.user_attrs.get("confirmation") or {"method": "best single trial (no re-measurement)", "candidates": []})
    conf["winner_trial"] = chosen
    conf["fastest_trial"] = fastest
    study.set_user_attr("confirmation", conf)
    logger.info("enough rule: trial %d (%s) at %.1f samples/s; fastest trial %d at %.1f", chosen, c.get("config"), rates[chosen], fastest, rates[fastest])
    return selection


# ------------------------------------------------------------------------------------------- summary
def training_summary(study: optuna.Study) -> dict[str, Any]:
    """Side by side from one study: the model's ceiling, the defaults, the best torch and best DALI configs
    and the chosen one, each with its training samples/s and fraction of the ceiling."""
    rates = trial_rates(study)
    trials = {t.number: t for t in study.get_trials(deepcopy=False) if t.number in rates}
    ceiling = study.user_attrs.get("model_ceiling") or {}

    def row(label: str, n: int | None) -> dict[str, Any]:
        if n is None:
            return {"label": label, "config": None, "samples_per_s": None}
        a = trials[n].user_attrs
        out = {"label": label, "trial": n, "config": a.get("config"), "samples_per_s": round(rates[n], 1),
               "cpu_threads": loader_threads(a["loader"]), "peak_host_mib": a.get("peak_host_mib"), "peak_gpu_mib": a.get("peak_gpu_mib")}
        out.update(ceiling_attrs(ceiling, int(a["loader"]["batch_size"]), rates[n]))
        return out

    def best(pred: Callable[[Any], bool]) -> int | None:
        ns = [n for n, t in trials.items() if pred(t)]
        return max(ns, key=lambda n: rates[n]) if ns else None

    defaults = best(lambda t: t.user_attrs.get("role") == "defaults")
    torch_n = best(lambda t: t.user_attrs["loader"].get("backend", "torch") == "torch")
    dali_n = best(lambda t: t.user_attrs["loader"].get("backend") == "dali")
    conf = study.user_attrs.get("confirmation") or {}
    chosen = conf.get("winner_trial", max(rates, key=rates.get) if rates else None)
    rows = [row("defaults", defaults), row("best torch", torch_n), row("best DALI", dali_n), row("chosen (enough rule)", chosen)]
    ratio = rates[dali_n] / rates[torch_n] if dali_n is not None and torch_n is not None else None
    win = rows[-1]
    return {
        "model": ceiling.get("model") or study.user_attrs.get("model"),
        "ceiling": {b: v.get("samples_per_s") for b, v in ceiling.get("per_batch_size", {}).items()},
        "rows": rows,
        "dali_over_torch": round(ratio, 2) if ratio else None,
        "chosen_fraction_of_ceiling": win.get("fraction_of_ceiling"),
        "reaches_95_percent": (win.get("fraction_of_ceiling") or 0) >= 0.95,
        "selection": (study.user_attrs.get("result_extra") or {}).get("selection"),
    }

