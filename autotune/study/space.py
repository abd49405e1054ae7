"""Search spaces: YAML data that says which knobs to tune, their ranges or choices, and when each applies.

A space file::

    name: default
    params:
      backend: {choices: [torch, dali]}
      batch_size: {choices: [64, 128, 256]}
      num_workers: {int: [0, cores], when: {backend: torch}}
      prefetch_factor: {choices: [2, 4], when: {backend: torch, num_workers: {gt: 0}}}
      hw_decoder_load: {float: [0.0, 1.0], step: 0.05, when: {backend: dali, dali_device: gpu}}

Each parameter has exactly one of ``choices`` (a list), ``int`` ([low, high]) or ``float`` ([low, high]),
optionally ``log: true`` or ``step``. ``cores`` (optionally ``cores*K`` or ``cores/K``) stands for the CPU
cores usable here. ``when`` holds conditions on earlier parameters or on the context (``device``: cuda or
cpu); a value is equality, a list is membership, a mapping is ``{gt|ge|lt|le|ne: value}``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.config.files import read_yaml
from autotune.config.schema import DEFAULT_BACKEND, MAX_BATCH_SIZE, param_names
from autotune.errors import ConfigError, SpaceError
from autotune.loaders.backends import BACKENDS, get_backend

if TYPE_CHECKING:
    import optuna

logger = logging.getLogger(__name__)



def shipped_dir() -> Path:
    """The folder of the shipped spaces: ``search_spaces/`` of the source checkout this module runs from, else
    the installed package ``autotune.search_spaces`` (the same folder, mapped by ``pyproject.toml``)."""
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "search_spaces").is_dir():
        return checkout / "search_spaces"
    from importlib.resources import files

    try:
        return Path(str(files("autotune.search_spaces")))
    except ModuleNotFoundError:  # an install that left them out: resolve_path says so
        return checkout / "search_spaces"


SPACES_DIR = shipped_dir()
CONTEXT_KEYS = ("device",)
#: the most steps a stepped float range may have: a finer step says nothing more, and Optuna fails on one too fine
MAX_STEPS = 1_000_000
_OPS = {"gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "ne": lambda a, b: a != b}


@dataclasses.dataclass(frozen=True)
class Param:
    name: str
    kind: str  # choices | int | float
    choices: tuple[Any, ...] = ()
    low: float = 0
    high: float = 0
    log: bool = False
    step: float | None = None
    when: tuple[tuple[str, Any], ...] = ()

    def applies(self, values: dict[str, Any]) -> bool:
        for key, cond in self.when:
            if key not in values:
                return False
            v = values[key]
            if isinstance(cond, list):
                if v not in cond:
                    return False
            elif isinstance(cond, dict):
                (op, ref), = cond.items()
                if v is None or not _OPS[op](v, ref):
                    return False
            elif v != cond:
                return False
        return True

    def suggest(self, trial: optuna.Trial) -> Any:
        if self.kind == "choices":
            return trial.suggest_categorical(self.name, list(self.choices))
        if self.kind == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log, step=int(self.step or 1))
        value = trial.suggest_float(self.name, self.low, self.high, log=self.log, step=self.step)
        # a stepped float comes back as low + k * step (0.9500000000000001): keep the step's decimals
        return round(value, _decimals(self.step)) if self.step else value

    def distribution(self) -> optuna.distributions.BaseDistribution:
        """The Optuna distribution :meth:`suggest` samples from (a resumed study's trials must share it)."""
        import optuna

        if self.kind == "choices":
            return optuna.distributions.CategoricalDistribution(list(self.choices))
        if self.kind == "int":
            return optuna.distributions.IntDistribution(int(self.low), int(self.high), log=self.log, step=int(self.step or 1))
        return optuna.distributions.FloatDistribution(self.low, self.high, log=self.log, step=self.step)

    def contains(self, value: Any) -> bool:
        if self.kind == "choices":
            return value in self.choices
        return value is not None and self.low <= value <= self.high

    def nearest(self, value: Any) -> Any:
        """The closest value this parameter allows: ``value`` itself when allowed; a number outside a range clamped
        into it; a value not among the choices the nearest numeric choice, or the first choice."""
        if self.contains(value):
            return value
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        if self.kind == "choices":
            nums = [c for c in self.choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
            return min(nums, key=lambda c: abs(c - value)) if numeric and nums else self.choices[0]
        return type(value)(min(max(value, self.low), self.high)) if numeric else value


def _decimals(step: float) -> int:
    """The decimals a step is written with: 0.05 -> 2, 0.5 -> 1, 2 -> 0."""
    text = f"{step:.10f}".rstrip("0")
    return len(text.split(".")[1]) if "." in text else 0


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    name: str
    params: tuple[Param, ...]
    source: str = "<memory>"

    def __getitem__(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def __contains__(self, name: str) -> bool:
        return any(p.name == name for p in self.params)

    def backends(self) -> tuple[str, ...]:
        return tuple(self["backend"].choices) if "backend" in self else (DEFAULT_BACKEND,)

    def suggest(self, trial: optuna.Trial, context: dict[str, Any]) -> dict[str, Any]:
        """Sample one config: each parameter whose conditions hold, in file order."""
        values: dict[str, Any] = dict(context)
        out: dict[str, Any] = {}
        for p in self.params:
            if p.applies(values):
                values[p.name] = out[p.name] = p.suggest(trial)
        out.setdefault("backend", self.backends()[0])
        return out

    def fix(self, name: str, value: Any) -> SearchSpace:
        """The same space with ``name`` fixed to one value (``--batch-size N``)."""
        old = self[name] if name in self else Param(name, "choices")
        new = dataclasses.replace(old, kind="choices", choices=(value,), log=False, step=None)
        if name in self:
            return dataclasses.replace(self, params=tuple(new if p.name == name else p for p in self.params))
        return dataclasses.replace(self, params=(new, *self.params))

    def restrict(self, name: str, allowed: tuple[Any, ...]) -> SearchSpace:
        if name not in self:
            return self
        p = self[name]
        if p.kind != "choices":
            return self
        choices = tuple(c for c in p.choices if c in allowed)
        return dataclasses.replace(self, params=tuple(dataclasses.replace(q, choices=choices) if q.name == name else q for q in self.params))


def _cores_value(v: Any, cores: int, where: str) -> Any:
    if isinstance(v, str) and v.strip().startswith("cores"):
        m = re.fullmatch(r"\s*cores\s*(?:([*/])\s*(\d+))?\s*", v)
        if not m:
            raise SpaceError(f"{where} must be a number or 'cores' ('cores*2', 'cores/2'), but got {v!r}")
        n = cores
        if m.group(1) == "*":
            n = cores * int(m.group(2))
        elif m.group(1) == "/":
            if int(m.group(2)) == 0:
                raise SpaceError(f"{where} divides the cores by zero ({v!r}); use 'cores/2' or another whole number above 0")
            n = max(1, cores // int(m.group(2)))
        return n
    return v


def _rule(name: str) -> tuple[str, float | None, float | None]:
    """The values parameter ``name`` may take: (the kind, the least, the most), from the kind of loader that owns it;
    checked when the space is read, so that a bad value is an error that names the file, not a failure at the trial
    that draws it."""
    if name == "batch_size":
        return ("int", 1, MAX_BATCH_SIZE)  # more is no loader to measure: every trial was refused for its memory
    for backend in BACKENDS.values():
        if name in backend.space_rules:
            return backend.space_rules[name]
    return ("any", None, None)


def _check_values(name: str, values: tuple[Any, ...], err: Callable[[str, str], SpaceError]) -> None:
    kind, lo, hi = _rule(name)
    for v in values:
        if kind == "bool":
            ok = isinstance(v, bool)
            rule = "true or false"
        elif kind == "device":
            ok, rule = v in ("cpu", "gpu"), "cpu or gpu"
        elif kind in ("int", "number"):
            ok = isinstance(v, (int, float) if kind == "number" else int) and not isinstance(v, bool)
            ok = ok and (lo is None or v >= lo) and (hi is None or v <= hi)
            num = str if kind == "int" else "{:g}".format  # 1048576, not 1.04858e+06
            rule = ("an integer" if kind == "int" else "a number") + (f" from {num(lo)}" if lo is not None else "")
            rule += f" to {num(hi)}" if hi is not None else ""
        else:
            continue
        if not ok:
            raise err(f"params.{name}", f"must be {rule}, but holds {v!r}")


def _range(field: str, kind: str, spec: dict[str, Any], cores: int, source: str, err: Callable[[str, str], SpaceError]) -> dict[str, Any]:
    """The ``low``, ``high``, ``log`` and ``step`` of an ``int`` or ``float`` parameter, checked."""
    rng = spec[kind]
    if not isinstance(rng, list) or len(rng) != 2:
        raise err(f"{field}.{kind}", "must be a list [low, high]")
    low, high = (_cores_value(v, cores, f"{source}: {field}.{kind}") for v in rng)
    num = (int,) if kind == "int" else (int, float)
    if not all(isinstance(v, num) and not isinstance(v, bool) for v in (low, high)):
        raise err(f"{field}.{kind}", f"must hold two {'integers' if kind == 'int' else 'numbers'} (or 'cores', 'cores*2', 'cores/2'), but got {rng}")
    if low > high:
        raise err(f"{field}.{kind}", f"must have low <= high, but got {rng}")
    log, step = spec.get("log", False), spec.get("step")
    if not isinstance(log, bool):
        raise err(f"{field}.log", f"must be true or false, but got {log!r}")
    if log and low <= 0:
        raise err(f"{field}.log", f"needs low > 0, but got {low}")
    if step is not None:
        whole = isinstance(step, int) or (isinstance(step, float) and step.is_integer())
        if not isinstance(step, (int, float)) or isinstance(step, bool) or not math.isfinite(step) or step <= 0 or (kind == "int" and not whole):
            raise err(f"{field}.step", f"must be {'a whole number' if kind == 'int' else 'a number'} above 0, but got {step!r}")
        if kind == "int":
            step = int(step)
        if log and step != 1:
            raise err(f"{field}.step", f"cannot be {step!r} with log: true (Optuna samples a log range in steps of 1 or none); drop one")
        steps = (high - low) / step
        if kind == "float" and steps > MAX_STEPS:  # step 1e-28 on [0, 1]: Optuna's decimal arithmetic failed with a traceback, after the study was made
            raise err(f"{field}.step", f"{step!r} cuts the range {rng} into {steps:.3g} steps, more than {MAX_STEPS:,} can be sampled; "
                                       f"use a step of at least {(high - low) / MAX_STEPS:.3g}, or no step")
        if abs(steps - round(steps)) > 1e-9 * max(1.0, steps):  # Optuna would warn and cut the range to low + k * step
            top = low + int(steps + 1e-9) * step
            top = int(top) if kind == "int" else round(top, 10)
            if any(isinstance(v, str) for v in rng):  # 'cores' differs by machine: the range ends at its last step, quietly
                high = top
            else:
                raise err(f"{field}.step", f"{step!r} does not divide the range {rng} (Optuna would sample [{low}, {top}] only); "
                                           f"use a step that divides {round(high - low, 10)}, or end the range at {top}")
    return {"low": low, "high": high, "log": log, "step": step}


def _check_when(field: str, when: Any, params: list[Param], by_cores: set[str], err: Callable[[str, str], SpaceError]) -> None:
    """A parameter's ``when``: conditions on earlier parameters or the context, each one it can meet."""
    if not isinstance(when, dict):
        raise err(f"{field}.when", "must be a mapping of parameter to required value")
    for k, cond in when.items():
        op, ref = next(iter(cond.items())) if isinstance(cond, dict) and cond else (None, None)
        earlier = next((q for q in params if q.name == k), None)
        if earlier is None and k not in CONTEXT_KEYS:
            earlier_names = ", ".join(q.name for q in params) or "none yet"
            raise err(f"{field}.when.{k}", f"must name an earlier parameter ({earlier_names}) or one of {', '.join(CONTEXT_KEYS)}")
        if isinstance(cond, dict) and (len(cond) != 1 or next(iter(cond)) not in _OPS):
            raise err(f"{field}.when.{k}", f"must be a value, a list, or one of {{{'|'.join(_OPS)}: value}}")
        if isinstance(cond, dict) and op != "ne" and (not isinstance(ref, (int, float)) or isinstance(ref, bool)):
            raise err(f"{field}.when.{k}", f"compares with a number, but got {cond!r}")
        if isinstance(cond, dict) and op != "ne":
            numbers = earlier is not None and all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in earlier.choices)
            numeric = earlier is not None and (earlier.kind != "choices" or numbers)
            if not numeric:
                raise err(f"{field}.when.{k}", f"compares {k} with a number, but {k} takes values that are not numbers; use a value or a list of them")
        if k == "device" and not isinstance(cond, dict) and not all(c in ("cpu", "cuda") for c in (cond if isinstance(cond, list) else [cond])):
            raise err(f"{field}.when.device", f"must be cpu or cuda (where batches go), but got {cond!r}")
        if isinstance(cond, list) and (not cond or any(isinstance(c, (list, dict)) for c in cond)):
            raise err(f"{field}.when.{k}", f"as a list must hold plain values (e.g. [torch, dali]), but got {cond!r}")
        if earlier is not None and earlier.kind == "choices" and not isinstance(cond, dict) and k not in by_cores:  # 'cores' choices differ by machine
            never = [c for c in (cond if isinstance(cond, list) else [cond]) if c not in earlier.choices]
            if never:  # a typo (pytorch) switched the knob off without a word
                raise err(f"{field}.when.{k}", f"asks for {never[0]!r}, which {k} never takes (its choices: {', '.join(map(str, earlier.choices))}); "
                                               "use one of them")


def parse_space(data: Any, *, source: str = "<memory>", cores: int = 1) -> SearchSpace:
    """Validate a space mapping; errors name the file, the field and the rule."""
    def err(field: str, rule: str) -> SpaceError:
        return SpaceError(f"{source}: {field} {rule}")

    if not isinstance(data, dict):
        raise err("the file", "must be a mapping with 'params'")
    unknown = set(data) - {"name", "description", "params"}
    if unknown:
        raise err(f"key {sorted(unknown)[0]!r}", "is unknown; allowed keys are: name, description, params")
    params_in = data.get("params")
    if not isinstance(params_in, dict) or not params_in:
        raise err("params", "must be a non-empty mapping of parameter name to its range")
    params: list[Param] = []
    by_cores: set[str] = set()  # parameters whose choices name the cores: they differ by machine
    known = param_names()
    for name, spec in params_in.items():
        field = f"params.{name}"
        if name not in known:
            raise err(field, f"is not a loader parameter; known: {', '.join(known)}")
        if not isinstance(spec, dict):
            raise err(field, "must be a mapping such as {choices: [...]} or {int: [low, high]}")
        bad = set(spec) - {"choices", "int", "float", "log", "step", "when"}
        if bad:
            raise err(f"{field}.{sorted(bad)[0]}", "is unknown; allowed: choices, int, float, log, step, when")
        kinds = [k for k in ("choices", "int", "float") if k in spec]
        if len(kinds) != 1:
            raise err(field, "needs exactly one of choices, int, float")
        kind, takes = kinds[0], _rule(name)[0]
        if kind == "float" and takes in ("int", "bool", "device"):  # b=21.7 would be sampled
            what = {"int": "whole numbers", "bool": "true or false", "device": "cpu or gpu"}[takes]
            raise err(f"{field}.float", f"is not allowed: {name} takes {what}; use {'int: [low, high]' if takes == 'int' else 'choices: [...]'}")
        kw: dict[str, Any] = {}
        if kind == "choices":
            ch = spec["choices"]
            if not isinstance(ch, list) or not ch:
                raise err(f"{field}.choices", "must be a non-empty list")
            kw["choices"] = tuple(_cores_value(c, cores, f"{source}: {field}.choices") for c in ch)
            if any(isinstance(c, str) and c.strip().startswith("cores") for c in ch):
                by_cores.add(name)
        else:
            kw.update(_range(field, kind, spec, cores, source, err))
        when = spec.get("when", {})
        _check_when(field, when, params, by_cores, err)
        if name in ("backend", "batch_size") and when:
            raise err(f"{field}.when", "is not allowed: every config has a backend and a batch size")
        if name == "backend" and kind != "choices":
            raise err(field, f"must be {{choices: [...]}} of {' and '.join(BACKENDS)}")
        _check_values(name, kw["choices"] if kind == "choices" else (kw["low"], kw["high"]), err)
        params.append(Param(name, kind, when=tuple(when.items()), **kw))
    space = SearchSpace(str(data.get("name") or Path(source).stem), tuple(params), source)
    if "batch_size" not in space:
        raise err("params.batch_size", "is required (use {choices: [N]} to fix it)")
    for b in space.backends():
        if b not in BACKENDS:
            raise err("params.backend.choices", f"must be {' or '.join(BACKENDS)}, but got {b!r}")
    return space


def resolve_path(name_or_path: str) -> Path:
    """A space given as a path, or the name of a shipped one (``default``, ``cpu``, ``torch``, ``dali``).

    A path that exists wins; otherwise a name, or ``search_spaces/NAME.yaml`` as written in older docs, is
    looked up among the shipped spaces, whatever the working folder.
    """
    p = Path(name_or_path)
    if p.exists():
        return p
    if p.parts[:-1] == ("search_spaces",) and (SPACES_DIR / p.name).is_file():
        return SPACES_DIR / p.name
    if p.suffix in (".yaml", ".yml") and len(p.parts) > 1:
        return p  # a path the user gave: load_space says it does not exist
    shipped = SPACES_DIR / f"{name_or_path.removesuffix('.yaml')}.yaml"
    if p.name == name_or_path and shipped.is_file():
        return shipped
    names = ", ".join(sorted(x.stem for x in SPACES_DIR.glob("*.yaml")))
    if not names:
        raise SpaceError(f"search space {name_or_path!r} not found, and no shipped space is installed; reinstall autotune or pass a YAML file")
    raise SpaceError(f"search space {name_or_path!r} not found; pass a YAML file or one of: {names}")


def load_space(name_or_path: str, *, cores: int = 1, device: str = "cpu", dali: bool | None = None) -> SearchSpace:
    """Load, validate and fit a space to this machine.

    A kind of loader whose framework does not import here (DALI) is left out, said once, when the space offers
    another; a space that offers only such kinds raises with what to install. ``dali`` says whether the kinds that
    need an extra install import (None: find out). Each kind then leaves out what it cannot do on ``device`` (GPU
    decode without a GPU).
    """
    path = resolve_path(name_or_path)
    try:
        data = read_yaml(path, "search space")
    except ConfigError as e:
        raise SpaceError(str(e)) from None
    space = parse_space(data, source=str(path), cores=cores)
    kinds = [get_backend(b) for b in space.backends()]
    missing = [k for k in kinds if k.install and not (k.available() if dali is None else dali)]
    for k in missing:
        left = [o.label for o in kinds if o not in missing]
        if not left:
            raise SpaceError(f"{path}: the space tunes {k.label} only, but {k.label} is not installed; install it with: {k.install}")
        logger.warning("%s is not installed: tuning %s only (install it with: %s)", k.label, " and ".join(left), k.install)
    if missing:
        space = space.restrict("backend", tuple(k.name for k in kinds if k not in missing))
    for k in kinds:
        if k not in missing:
            space = k.fit_space(space, device)
    return space
