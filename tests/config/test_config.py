"""The YAML schema: round trip, strict reading, DataLoader keywords, atomic writes."""

from __future__ import annotations

import json
import os
import re
import types

import pytest
import torch

from autotune.config.files import atomic_write_text, load_config, save_config
from autotune.config.schema import Config, LoaderConfig, TorchOptions
from autotune.errors import ConfigError, UserError


def _cfg(**loader) -> Config:
    params = {"backend": "torch", "batch_size": 32, "num_workers": 2, "pin_memory": True, "prefetch_factor": 4, "persistent_workers": True}
    params.update(loader)
    return Config(loader=LoaderConfig.from_params(params), result={"samples_per_s": 100.0})


def test_round_trip(tmp_path):
    path = tmp_path / "a.yaml"
    cfg = _cfg()
    save_config(cfg, path)
    back = load_config(path)
    assert back.loader == cfg.loader
    assert back.result == cfg.result
    text = path.read_text()
    assert "num_workers: 2" in text and "schema: 1" in text


def test_dataloader_kwargs_feed_a_dataloader():
    cfg = _cfg()
    kw = cfg.dataloader_kwargs()
    assert kw == {"batch_size": 32, "num_workers": 2, "pin_memory": True, "prefetch_factor": 4, "persistent_workers": True}
    ds = torch.utils.data.TensorDataset(torch.arange(64))
    loader = torch.utils.data.DataLoader(ds, **_cfg(num_workers=0).dataloader_kwargs())
    assert len(loader) == 2


def test_no_worker_options_without_workers():
    assert TorchOptions(num_workers=0, prefetch_factor=4, persistent_workers=True) == TorchOptions()
    assert "prefetch_factor" not in _cfg(num_workers=0).dataloader_kwargs()


def test_num_workers_0_as_an_override_drops_the_worker_only_keywords():
    """dataloader_kwargs(num_workers=0), to debug in the main process, kept prefetch_factor and persistent_workers:
    DataLoader raised a ValueError."""
    cfg = Config(loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 4, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": True}))
    kw = cfg.dataloader_kwargs(num_workers=0)
    assert kw == {"batch_size": 4, "num_workers": 0, "pin_memory": False}
    torch.utils.data.DataLoader(list(range(8)), **kw)  # accepted
    assert cfg.dataloader_kwargs(num_workers=0, prefetch_factor=3)["prefetch_factor"] == 3  # asked for: passed on as given


def test_dali_config_has_no_dataloader_kwargs():
    cfg = Config(loader=LoaderConfig.from_params({"backend": "dali", "batch_size": 64, "dali_device": "cpu", "num_threads": 2}))
    with pytest.raises(ConfigError, match="build_loader"):
        cfg.dataloader_kwargs()


@pytest.mark.parametrize(
    "text, match",
    [
        ("schema: 1\nloader: {backend: torch, batch_size: 8}\nextra: 1\n", "unknown key 'extra'"),
        ("schema: 1\nloader: {backend: torch, batch_size: 8, torch: {num_wrkers: 2}}\n", "loader.torch.num_wrkers"),
        ("schema: 1\nloader: {backend: jax, batch_size: 8}\n", "loader.backend"),
        ("schema: 2\nloader: {backend: torch, batch_size: 8}\n", "schema must be 1"),
        ("schema: 1\n", "missing the 'loader'"),
        ("- a\n- b\n", "not an autotune config"),
        ("schema: 1\nloader: {backend: torch, batch_size: 8\n", "not valid YAML"),
        ("schema: 1\nloader: {backend: dali, batch_size: 8, dali: {hw_decoder_load: 3}}\n", "between 0 and 1"),
        ("schema: 1\nloader: {backend: torch, batch_size: true}\n", "loader.batch_size must be an integer, but got True"),
        # no loader to build: refused here in one line, not later by build_loader's memory check
        (
            "schema: 1\nloader: {backend: torch, batch_size: 100000000000000000000}\n",
            "loader.batch_size must be between 1 and 1048576, but got 100000000000000000000",
        ),
        (
            "schema: 1\nloader: {backend: dali, batch_size: 8}\ntorch_fallback: {batch_size: 2097152, torch: {}}\n",
            "torch_fallback.batch_size must be between 1 and 1048576",
        ),
        ("schema: 1\nloader: {backend: torch, batch_size: 8, torch: {num_workers: '4'}}\n", "num_workers must be an integer, but got '4'"),
        ("schema: 1\nloader: {backend: torch, batch_size: 8, torch: {num_workers: true}}\n", "num_workers must be an integer, but got True"),
        ("schema: 1\nloader: {backend: torch, batch_size: 8, torch: {pin_memory: 'yes'}}\n", "pin_memory must be true or false"),
        ("schema: 1\nloader: {backend: dali, batch_size: 8, dali: {num_threads: false}}\n", "num_threads must be an integer"),
        (
            "schema: 1\nloader: {backend: torch, batch_size: 8}\nresult: {samples_per_s: fast}\n",
            "result.samples_per_s must be a number of at least 0, but got 'fast'",
        ),
        ("schema: 1\nloader: {backend: torch, batch_size: 8}\nresult: {spread: [1, x]}\n", "result.spread must be a list of numbers"),
    ],
)
def test_bad_config_files(tmp_path, text, match):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_config(path)


def test_unsafe_yaml_tags_are_refused(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("schema: 1\nloader: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


def _bomb(levels: int = 9) -> str:
    """A "billion laughs" YAML: each line holds nine aliases of the line above."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]")
    return "schema: 1\nloader: {backend: torch, batch_size: 8}\nresult:\n" + "\n".join("  " + line for line in lines) + "\n"


def test_yaml_aliases_are_refused_before_they_expand(tmp_path, capsys):
    """1.6 KB that would expand to 9**9 strings: one line, exit 2, and on stdout (--json) only the error."""
    from autotune.cli import main

    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb())
    assert len(path.read_bytes()) < 2000
    with pytest.raises(ConfigError, match=r"uses a YAML alias \(\*l0\) at line 5; autotune files hold no aliases"):
        load_config(path)
    assert main(["show", str(path), "--json"]) == 2
    out, err = capsys.readouterr()
    assert json.loads(out)["exit_code"] == 2 and err.count("\n") == 1 and "alias" in err
    space = tmp_path / "space.yaml"
    space.write_text("params:\n  batch_size: &b {choices: [8, 16]}\n  num_workers: *b\n")
    from autotune.errors import SpaceError
    from autotune.study.space import load_space

    with pytest.raises(SpaceError, match="alias"):
        load_space(str(space))


def test_a_key_given_twice_is_named_not_silently_overwritten(tmp_path):
    """PyYAML keeps the last of two equal keys: a space with batch_size twice would tune the range below the one read."""
    from autotune.errors import SpaceError
    from autotune.study.space import load_space

    space = tmp_path / "space.yaml"
    space.write_text("name: mine\nparams:\n  batch_size: {choices: [64]}\n  num_workers: {int: [0, 2]}\n  batch_size: {choices: [32, 64]}\n")
    with pytest.raises(SpaceError, match=r"gives the key 'batch_size' twice \(lines 3 and 5\); keep one of them"):
        load_space(str(space))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("schema: 1\nloader: {backend: torch, batch_size: 8, batch_size: 16}\n")
    with pytest.raises(ConfigError, match=r"gives the key 'batch_size' twice \(on line 2\)"):
        load_config(cfg)
    cfg.write_text("schema: 1\nloader: {backend: torch, batch_size: 8}\nresult: {a: {x: 1}, b: {x: 2}}\n")  # equal keys, other mappings
    assert load_config(cfg).loader.batch_size == 8
    cfg.write_text("schema: 1\nloader: {<<: {batch_size: 8}, backend: torch}\n")  # a merge key is no duplicate
    assert load_config(cfg).loader.batch_size == 8


def _full_config(dataset) -> Config:
    from autotune.config import fingerprint

    result = {
        "samples_per_s": 500.0,
        "spread": [480.0, 510.0],
        "scores": [500.0, 495.0],
        "startup_s": 1.5,
        "peak_gpu_mib": None,
        "peak_host_mib": 900.0,
        "defaults_samples_per_s": 100.0,
        "heuristic_samples_per_s": 400.0,
        "speedup_vs_defaults": 5.0,
        "speedup_vs_heuristic": 1.25,
        "ranks": 2,
        "per_rank_samples_per_s": [240.0, 260.0],
        "fraction_of_ceiling": 0.9,
        "model_ceiling_samples_per_s": 550.0,
    }
    study = {"name": "s", "storage": "sqlite:///autotune.db", "trials": 5, "complete": 4, "failed": {"crash": 1}, "best_trial": 3}
    return Config(
        loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": 1}),
        dataset=fingerprint.dataset_summary(dataset),
        hardware=fingerprint.collect(),
        result=result,
        study=study,
        budgets={"host_mib": 1000.0},
        measurement={"windows": 2},
    )


def _leaves(data, path=()):
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(data, list) and data:
        yield from _leaves(data[0], (*path, 0))
    else:
        yield path


def _replaced(data, path, value):
    import copy

    data = copy.deepcopy(data)
    node = data
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return data


@pytest.mark.slow
def test_show_and_check_survive_any_value_in_any_field(tmp_path, tiny_dataset, capsys):
    """Every scalar of a config replaced by text, a boolean or null: `show --json` and `check` (and the table of
    `show`, for text) either print the file or exit 2 with one line; never a traceback."""
    import yaml

    from autotune.cli import main
    from autotune.config.files import dump_yaml

    base = _full_config(tiny_dataset).to_dict()
    path = tmp_path / "c.yaml"
    tried = 0
    for leaf in _leaves(base):
        for value in ("fast", True, None):
            path.write_text(dump_yaml(_replaced(base, leaf, value)))
            check = ["check", str(path)] + ([] if leaf[0] == "dataset" else ["--no-dataset"])  # the dataset scan only where it matters
            for argv in ([["show", str(path)]] if value == "fast" else []) + [["show", str(path), "--json"], check]:
                rc = main(argv)  # anything but a UserError would raise here
                out, err = capsys.readouterr()
                assert rc in (0, 1, 2), (leaf, value, argv)
                if rc == 2:
                    assert err.count("\n") == 1 and err.startswith("autotune: error: "), (leaf, value, err)
                if "--json" in argv and rc == 0:
                    assert yaml.safe_load(out) is not None
            tried += 1
    assert tried > 100


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "c.yaml"
    path.write_text("old\n")

    def boom(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        atomic_write_text(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["c.yaml"]  # no temp file left behind


def test_atomic_write_uses_umask(tmp_path):
    old = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "u.yaml", "x\n")
    finally:
        os.umask(old)
    assert (tmp_path / "u.yaml").stat().st_mode & 0o777 == 0o640


def test_a_config_is_never_written_over_a_device_and_a_link_stays_a_link(tmp_path):
    import os

    from autotune.config.files import atomic_write_text, write_problem

    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    assert "not a regular file" in write_problem(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        atomic_write_text(fifo, "x: 1\n")
    assert not fifo.is_file()  # still the pipe
    real = tmp_path / "shared" / "real.yaml"
    real.parent.mkdir()
    real.write_text("old\n")
    link = tmp_path / "autotune.yaml"
    link.symlink_to(real)
    assert write_problem(link) is None
    atomic_write_text(link, "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"


def test_build_loader_takes_a_yaml_path_and_refuses_an_epoch_without_a_batch(tiny_dataset, tmp_path):
    import autotune
    from autotune.errors import UserError

    cfg = Config(loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": 0}), device="cpu")
    path = tmp_path / "autotune.yaml"
    save_config(cfg, path)
    loader = autotune.build_loader(tiny_dataset, str(path))  # a path reads as load_config would
    assert len(loader) == len(list(tiny_dataset.rglob("*.jpg"))) // 8
    with pytest.raises(UserError, match=r"batch size 8 is larger than the 2 images of this shard .* re-tune on this dataset"):
        autotune.build_loader(tiny_dataset, cfg, shard_id=0, num_shards=12)
    with pytest.raises(UserError, match="cfg must be a Config"):
        autotune.build_loader(tiny_dataset, {"backend": "torch"})


@pytest.mark.parametrize("kind", ["fifo", "deep", "bigint"])
def test_hostile_yaml_is_a_one_line_config_error(tmp_path, kind):
    import os

    from autotune.errors import ConfigError

    path = tmp_path / f"{kind}.yaml"
    if kind == "fifo":
        os.mkfifo(path)  # reading it would block for ever
    else:
        path.write_text("[" * 100_000 if kind == "deep" else "a: " + "9" * 5001)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "field, value, rule",
    [
        ("result.samples_per_s", float("nan"), "a number"),
        ("result.samples_per_s", 10**400, "a number"),  # an int no float can hold
        ("dataset.samples", "many", "a whole number"),
        ("result.samples_per_s", -1, "a number of at least 0"),  # show printed -1.0 samples/s
        ("dataset.excluded", "a/x.jpg", "a list of file names"),  # load_config took it; check refused it; build_loader raised
        ("device", "tpu", "cpu, cuda or cuda:N"),
    ],
)
def test_yaml_fields_with_impossible_values_are_refused(tmp_path, field, value, rule):
    import yaml as _yaml

    from autotune.errors import ConfigError

    cfg = Config(
        loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": 0}),
        device="cpu",
        dataset={"path": "/x", "samples": 24},
        result={"samples_per_s": 100.0},
    )
    data = cfg.to_dict()
    section, _, key = field.rpartition(".")
    (data[section] if section else data)[key] = value
    path = tmp_path / "a.yaml"
    path.write_text(_yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=rule):
        load_config(path)


@pytest.mark.parametrize(
    ("section", "needle"),
    [
        ("torch: {num_workers: 1, prefetch_factor: 1000000000000}", "loader.torch.prefetch_factor must be between 1 and 1024, but got 1000000000000"),
        ("torch: {num_workers: 1, prefetch_factor: -2}", "loader.torch.prefetch_factor must be between 1 and 1024, but got -2"),
        ("torch: {num_workers: 100000}", "loader.torch.num_workers must be between 0 and 16384"),
    ],
)
def test_a_knob_beyond_what_any_space_offers_is_refused_when_read(tmp_path, capsys, section, needle):
    """A prefetch of 10**12 batches passed `check` and hung the first batch; the YAML is held to the space's bounds."""
    from autotune.cli import main

    path = tmp_path / "a.yaml"
    path.write_text(f"schema: 1\nloader: {{backend: torch, batch_size: 8, {section}}}\n")
    with pytest.raises(ConfigError, match=re.escape(needle)):
        load_config(path)
    assert main(["check", str(path)]) == 2
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize("value", ["[1]", "{a: 1}", "7"])
def test_a_pipeline_that_is_no_name_is_refused_when_read(tmp_path, value):
    """`pipeline: [1]` passed load_config and `check`, then build_loader failed with "unhashable type: 'list'"."""
    from autotune.loaders.presets import get_preset

    path = tmp_path / "a.yaml"
    path.write_text(f"schema: 1\nloader: {{backend: torch, batch_size: 8}}\npipeline: {value}\n")
    with pytest.raises(ConfigError, match="pipeline must be a pipeline's name such as imagenet-train"):
        load_config(path)
    with pytest.raises(UserError, match="unknown pipeline"):
        get_preset(["x"])


def test_a_control_character_in_a_yaml_is_one_line(tmp_path, capsys):
    from autotune.cli import main

    path = tmp_path / "esc.yaml"
    path.write_text('schema: 1\nloader: {backend: torch, batch_size: 8}\npipeline: "imagenet-train\x1b[0m"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert "\n" not in str(caught.value) and "not valid YAML" in str(caught.value)
    assert main(["show", str(path)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_json_output_holds_no_infinity(tmp_path, capsys):
    """A study of another program may hold inf; `--json` wrote `Infinity`, which strict parsers refuse."""
    from autotune.cli import main

    path = tmp_path / "a.yaml"
    path.write_text("schema: 1\nloader: {backend: torch, batch_size: 8}\nhardware: {cpus: .inf, python: '3', torch: '2'}\n")
    main(["check", str(path), "--json", "--no-dataset"])
    out = capsys.readouterr().out
    assert "Infinity" not in out and json.loads(out, parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))["stale"] is True


@pytest.mark.parametrize("value", ["imagenet-foo", "null"])
def test_check_refuses_a_pipeline_build_loader_would_refuse(tmp_path, capsys, value):
    """`check` said "OK: this machine matches" on `pipeline: imagenet-foo`, then build_loader refused the YAML."""
    from autotune.cli import main

    path = tmp_path / "a.yaml"
    path.write_text(f"schema: 1\nloader: {{backend: torch, batch_size: 8}}\npipeline: {value}\n")
    assert main(["check", str(path), "--no-dataset"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"a.yaml: pipeline: unknown pipeline {'None' if value == 'null' else repr(value)}; use one of: imagenet-train, imagenet-eval" in line


@pytest.mark.parametrize(
    ("params", "knob"),
    [
        ({"backend": "dali", "batch_size": 8, "dali_device": "cpu", "num_threads": 1, "prefetch_queue_depth": 1024}, "lower loader.dali.prefetch_queue_depth"),
        ({"backend": "torch", "batch_size": 8, "num_workers": 16384, "prefetch_factor": 1024}, "lower loader.torch.prefetch_factor"),
    ],
)
def test_a_config_that_cannot_fit_this_machine_is_refused_by_build_loader_and_check(tiny_dataset, tmp_path, capsys, monkeypatch, params, knob):
    """A hand-edited prefetch_queue_depth: 1024 (within the schema's bounds) grew the training's memory until the
    kernel killed it; build_loader refuses it in one line, and check, load_config and --if-stale call it no match."""
    import psutil

    from autotune.cli import main
    from autotune.config import fingerprint
    from autotune.config.files import save_config
    from autotune.config.staleness import is_stale
    from autotune.loaders import build_loader

    monkeypatch.setattr(psutil, "virtual_memory", lambda: types.SimpleNamespace(total=2 * 2**30, available=2**30))  # a 2 GiB machine
    loader = LoaderConfig.from_params(params)
    path = tmp_path / "hand.yaml"
    save_config(Config(loader=loader, hardware=fingerprint.collect(), dataset=fingerprint.dataset_summary(tiny_dataset)), path)
    with pytest.raises(UserError, match=rf"would need about [\d,]+ GiB of host memory, over twice the 2 GiB this machine has .*; {knob}"):
        build_loader(tiny_dataset, str(path), device="cpu")
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "matters  memory: this loader config would need about" in out and knob in out and "STALE" in out
    stale, reasons = is_stale(path)  # run --if-stale re-tunes it; training is warned, strict refuses
    assert stale and any(r.startswith("memory: this loader config would need") for r in reasons)
    with pytest.warns(UserWarning, match="memory: this loader config would need"):
        load_config(path)
    small = LoaderConfig.from_params({**params, "prefetch_queue_depth": 2, "prefetch_factor": 2, "num_workers": 1})
    save_config(Config(loader=small, hardware=fingerprint.collect(), dataset=fingerprint.dataset_summary(tiny_dataset)), path)
    assert main(["check", str(path)]) == 0  # what fits is not flagged
    assert build_loader(tiny_dataset, str(path), device="cpu") is not None


def test_a_config_over_the_machine_but_not_twice_is_built_and_called_stale(tiny_dataset, tmp_path, capsys, monkeypatch):
    """The estimate errs high: between the machine's memory and twice it, build_loader builds (with load_config's
    warning) rather than refuse what may run; check still calls the YAML no match. GiB figures read apart."""
    import psutil

    from autotune.cli import main
    from autotune.config import fingerprint
    from autotune.config.files import save_config
    from autotune.dataset.scan import scan
    from autotune.loaders import build_loader
    from autotune.loaders.memory import estimate

    loader = LoaderConfig.from_params({"backend": "dali", "batch_size": 8, "dali_device": "cpu", "num_threads": 1, "prefetch_queue_depth": 1024})
    need = estimate(loader, scan(tiny_dataset))["host_mib"]
    monkeypatch.setattr(psutil, "virtual_memory", lambda: types.SimpleNamespace(total=int(need * 0.99 * 2**20), available=2**30))
    path = tmp_path / "hand.yaml"
    save_config(Config(loader=loader, hardware=fingerprint.collect(), dataset=fingerprint.dataset_summary(tiny_dataset)), path)
    assert main(["check", str(path)]) == 1
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "memory:" in ln)
    shown_need, shown_have = line.split("about ")[1].split(" GiB")[0], line.split("more than the ")[1].split(" GiB")[0]
    assert shown_need != shown_have  # never "about 7 GiB ..., more than the 7 GiB"
    with pytest.warns(UserWarning, match="memory: this loader config would need"):
        cfg = load_config(path)
    assert build_loader(tiny_dataset, cfg, device="cpu") is not None
