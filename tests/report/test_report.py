"""The report: built from a small stored study with the user attributes the runner sets (no loaders run)."""

from __future__ import annotations

import base64
import datetime as _dt
import html.parser
from pathlib import Path

import optuna
import pytest

from autotune.report import IMAGES, list_studies, overview, trial_rows, write_report

D = optuna.distributions
DISTS = {
    "backend": D.CategoricalDistribution(("torch", "dali")),
    "batch_size": D.CategoricalDistribution((16, 32, 64)),
    "num_workers": D.IntDistribution(0, 2),
    "prefetch_factor": D.CategoricalDistribution((2, 4)),
    "persistent_workers": D.CategoricalDistribution((True, False)),
    "num_threads": D.IntDistribution(1, 2),
    "prefetch_queue_depth": D.CategoricalDistribution((1, 2, 3)),
}
T0 = _dt.datetime.now() - _dt.timedelta(minutes=4)  # the running trial (study.ask) starts now

# (params, state, rate, outcome, extra attrs)
TRIALS = [
    ({"backend": "torch", "batch_size": 64, "num_workers": 0}, "COMPLETE", 40.0, "complete", {"role": "defaults"}),
    (
        {"backend": "torch", "batch_size": 64, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": True},
        "COMPLETE",
        120.0,
        "complete",
        {"role": "heuristic"},
    ),
    ({"backend": "torch", "batch_size": 32, "num_workers": 1, "prefetch_factor": 4, "persistent_workers": False}, "COMPLETE", 80.0, "complete", {}),
    (
        {"backend": "torch", "batch_size": 16, "num_workers": 2, "prefetch_factor": 4, "persistent_workers": True},
        "COMPLETE",
        150.0,
        "complete",
        {"fraction_of_ceiling": 0.71},
    ),
    ({"backend": "dali", "batch_size": 64, "num_threads": 1, "prefetch_queue_depth": 2}, "COMPLETE", 160.0, "complete", {}),
    ({"backend": "dali", "batch_size": 32, "num_threads": 2, "prefetch_queue_depth": 3}, "COMPLETE", 200.0, "complete", {"fraction_of_ceiling": 0.95}),
    ({"backend": "dali", "batch_size": 16, "num_threads": 2, "prefetch_queue_depth": 1}, "COMPLETE", 170.0, "complete", {}),
    (
        {"backend": "dali", "batch_size": 64, "num_threads": 2, "prefetch_queue_depth": 1},
        "PRUNED",
        None,
        "oom-host",
        {"message": "stopped: over the host memory budget", "peak_host_mib": 2600.0},
    ),
    (
        {"backend": "torch", "batch_size": 64, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": False},
        "FAIL",
        None,
        "crash",
        {"message": "child exited with SIGSEGV"},
    ),
    (
        {"backend": "torch", "batch_size": 16, "num_workers": 1, "prefetch_factor": 2, "persistent_workers": False},
        "PRUNED",
        30.0,
        "pruned",
        {"message": "slower than the median"},
    ),
]


def _loader(params: dict) -> dict:
    if params["backend"] == "dali":
        return {**params, "dali_device": "cpu"}
    return {"pin_memory": False, "persistent_workers": False, **params}


def add_trial(study: optuna.Study, i: int, params: dict, state: str, rate: float | None, outcome: str, extra: dict) -> None:
    attrs = {
        "loader": _loader(params),
        "config": " ".join(f"{k}={v}" for k, v in params.items()),
        "outcome": outcome,
        "samples_per_s": rate,
        "spread": [rate * 0.9, rate * 1.1] if rate else None,
        "windows": [rate, rate] if rate else [],
        "peak_host_mib": 500.0 + 100 * i,
        "peak_gpu_mib": None,
        "startup_s": 0.5,
        "duration_s": 4.0,
        **extra,
    }
    st = getattr(optuna.trial.TrialState, state)
    study.add_trial(
        optuna.trial.FrozenTrial(
            number=i,
            trial_id=i,
            state=st,
            value=rate if st == optuna.trial.TrialState.COMPLETE else None,
            values=None,
            datetime_start=T0 + _dt.timedelta(seconds=20 * i),
            datetime_complete=T0 + _dt.timedelta(seconds=20 * i + 15),
            params=params,
            distributions={k: DISTS[k] for k in params},
            user_attrs=attrs,
            system_attrs={},
            intermediate_values={0: rate, 1: rate} if rate else {},
        )
    )


def make_study(url: str, name: str = "tiny-abc123-20261129", trials: list = TRIALS, *, running: bool = True) -> optuna.Study:
    """A stored study shaped like one 'autotune run' leaves behind."""
    study = optuna.create_study(storage=url, study_name=name, direction="maximize")
    for k, v in {
        "dataset": {"path": "/data/tiny", "samples": 24, "classes": 3, "mean_bytes": 4000},
        "pipeline": "imagenet-train",
        "device": "cpu",
        "hardware": {"gpu": None, "gpus": 0, "cpus": 2, "ram_gib": 8, "torch": "2.6", "dali": None},
        "budgets": {"host_mib": 2500.0, "gpu_mib": None, "shm_mib": None},
        "measurement": {"window_s": 0.2, "windows": 2},
        "space": "cpu",
        "sampler": "tpe",
        "pruner": "median",
        "created": "2026-11-29T12:00:00Z",
        "model": "resnet18 (simulated)",
        "model_ceiling": {"samples_per_s": 210.0, "batch_size": 32, "per_batch_size": {"32": {"outcome": "complete", "samples_per_s": 210.0}}},
    }.items():
        study.set_user_attr(k, v)
    for i, t in enumerate(trials):
        add_trial(study, i, *t)
    if any(t[1] == "COMPLETE" and t[2] == 200.0 for t in trials):
        study.set_user_attr(
            "confirmation",
            {
                "method": "top 2 re-measured 2x each, interleaved; winner by median of all scores",
                "winner_trial": 5,
                "candidates": [
                    {"trial": 5, "config": "dali", "scores": [200.0, 190.0, 210.0], "median": 200.0},
                    {"trial": 6, "config": "dali", "scores": [170.0, 160.0, 165.0], "median": 165.0},
                ],
            },
        )
    if running:
        study.ask()  # a trial still running (another worker, or a run that was killed)
    return study


@pytest.fixture()
def stored(tmp_path) -> tuple[optuna.Study, str]:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    return make_study(url), url


class _Refs(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list) -> None:
        for k, v in attrs:
            if k in ("src", "href", "srcset", "poster", "data") or (k == "rel" and tag == "link"):
                self.refs.append((tag, k, v or ""))
            if k == "id":
                self.ids.add(v)


def assert_self_contained(page: Path) -> int:
    """Every reference in the page resolves inside its folder or inline; returns the number of images."""
    text = page.read_text(encoding="utf-8")
    parser = _Refs()
    parser.feed(text)
    images = 0
    for tag, attr, value in parser.refs:
        if tag == "a" and attr == "href":
            assert value.startswith("#") and value[1:] in parser.ids, f"link {value!r} leaves the page or has no target"
            continue
        assert tag == "img" and attr == "src", f"<{tag} {attr}={value[:60]!r}> would load something from outside"
        if value.startswith("data:"):
            assert value.startswith("data:image/png;base64,")
            assert base64.b64decode(value.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
        else:
            target = (page.parent / value).resolve()
            assert target.parent == page.parent.resolve() and target.is_file(), f"image {value!r} is not a file in the report folder"
        images += 1
    assert "url(" not in text and "@import" not in text, "the style sheet must not load anything"
    return images


@pytest.mark.slow
def test_report_has_every_section_and_image(stored, tmp_path):
    study, url = stored
    folder = write_report(study, url, tmp_path / "reports")
    assert folder == tmp_path / "reports" / study.study_name
    md = (folder / "report.md").read_text()
    page = (folder / "report.html").read_text()
    for _, title, file in IMAGES:
        assert (folder / file).read_bytes()[:4] == b"\x89PNG", file
        assert f"## {title}" in md and f"]({file})" in md
        assert f">{title}</h2>" in page and f'data-file="{file}"' in page
    for heading in ("Summary", "Failures by outcome", "Re-measurement of the top candidates", "All trials", "Explore the study"):
        assert f"## {heading}" in md and heading in page
    assert assert_self_contained(folder / "report.html") == len(IMAGES)
    # failures by outcome, the running trial, the ceiling, the dashboard command
    for text in (
        "oom-host",
        "crash",
        "pruned",
        "running",
        "child exited with SIGSEGV",
        "of ceiling",
        "95%",
        "ceiling 210 samples/s at batch 32",
        f"optuna-dashboard {url}",
    ):
        assert text in md, text
    assert "winner" in md and "trial #5" in md and "5.0x" in md  # 200 / 40


@pytest.mark.slow
def test_overview_and_rows_read_the_study(stored):
    study, url = stored
    ov = overview(study, url)
    assert ov["winner"]["trial"] == 5 and ov["winner"]["samples_per_s"] == 200.0
    assert ov["speedups"] == {"defaults": 5.0, "heuristic": pytest.approx(1.67, abs=0.01)}
    assert ov["model_ceiling"] == 210.0
    rows = trial_rows(study)
    assert [r["outcome"] for r in rows][-4:] == ["oom-host", "crash", "pruned", "running"]


@pytest.mark.slow
def test_rewriting_replaces_the_folder_and_leaves_no_temporaries(stored, tmp_path):
    study, url = stored
    reports = tmp_path / "reports"
    first = write_report(study, url, reports)
    (first / "stale.txt").write_text("from an earlier report")
    second = write_report(study, url, reports)
    assert first == second and not (second / "stale.txt").exists()
    assert [p.name for p in reports.iterdir()] == [study.study_name]


@pytest.mark.slow
def test_study_name_cannot_leave_the_reports_folder(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = make_study(url, name="../../outside/x y", trials=TRIALS[:3], running=False)
    folder = write_report(study, url, tmp_path / "reports")
    assert folder.parent == tmp_path / "reports" and (folder / "report.html").exists()
    assert not (tmp_path / "outside").exists()


@pytest.mark.slow
def test_symlinked_target_is_refused(stored, tmp_path):
    from autotune.errors import UserError

    study, url = stored
    (tmp_path / "reports").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "reports" / study.study_name).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UserError, match="not a plain folder"):
        write_report(study, url, tmp_path / "reports")
    assert list((tmp_path / "elsewhere").iterdir()) == []


@pytest.mark.slow
def test_report_of_a_study_without_a_completed_trial(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = make_study(url, trials=TRIALS[7:])
    folder = write_report(study, url, tmp_path / "reports")
    md = (folder / "report.md").read_text()
    assert "No trial has completed yet" in md and "Parameter importance over all trials not computed" in md
    assert assert_self_contained(folder / "report.html") == len(IMAGES)


@pytest.mark.slow
def test_storage_password_is_masked(stored, tmp_path):
    study, _ = stored
    folder = write_report(study, "postgresql://tuner:s3cret@db.example/autotune", tmp_path / "reports")
    for name in ("report.md", "report.html"):
        text = (folder / name).read_text()
        assert "s3cret" not in text and "postgresql://tuner:***@db.example/autotune" in text


@pytest.mark.slow
def test_without_matplotlib_the_report_says_how_to_get_plots(stored, tmp_path, monkeypatch):
    from autotune import _imports
    from autotune.errors import UserError

    def missing(feature):
        raise UserError("plot support needs the 'matplotlib' package, which is not installed; install it with: pip install -e \".[plot]\"")

    monkeypatch.setattr(_imports, "try_import", missing)
    study, url = stored
    folder = write_report(study, url, tmp_path / "reports")
    assert not list(folder.glob("*.png"))
    assert 'pip install -e ".[plot]"' in (folder / "report.md").read_text()
    assert assert_self_contained(folder / "report.html") == 0


@pytest.mark.slow
def test_a_failing_plot_is_a_note_not_a_failure(stored, tmp_path, monkeypatch):
    from autotune.report import _plots

    def broken(*a, **k):
        raise ValueError("bad axis")

    monkeypatch.setattr(_plots, "plot_importance", broken)
    study, url = stored
    folder = write_report(study, url, tmp_path / "reports")
    assert not (folder / "importance.png").exists() and (folder / "memory.png").exists()
    assert "Not drawn: ValueError: bad axis" in (folder / "report.md").read_text()
    assert assert_self_contained(folder / "report.html") == len(IMAGES) - 1


@pytest.mark.slow
def test_list_studies(stored, tmp_path):
    study, url = stored
    make_study(url, name="empty", trials=[], running=False)
    rows = {r["name"]: r for r in list_studies(url)}
    assert rows[study.study_name]["best_samples_per_s"] == 200.0 and rows[study.study_name]["trials"] == 11
    assert rows["empty"]["best_samples_per_s"] is None and rows["empty"]["trials"] == 0


def test_small_factors_are_not_rounded_away():
    from autotune.report._render import _num

    assert (_num(1.5), _num(0.65), _num(30.0), _num(54.3), _num(28136.4)) == ("1.5", "0.65", "30", "54", "28,136")


def test_the_headline_does_not_count_a_repeat_as_not_complete():
    from autotune.report._render import headline

    rows = dict(headline({"winner": None, "outcomes": {"complete": 3, "repeat": 1, "pruned": 1}, "speedups": {}, "trials": 5}))
    assert rows["trials"] == "5 (3 completed, 1 repeating an earlier config, 1 not complete)"


def test_the_time_row_says_when_its_figure_was_taken():
    """`autotune run` stores the time before writing the YAML and the report, and its "took" line adds the writing:
    the report's figure says it stops short of that, so the two do not seem to disagree."""
    from autotune.report._render import facts

    base = {"dataset": {}, "hardware": {}, "measurement": {}, "budgets": {}, "study": "s", "storage": "sqlite:///x.db"}
    before = dict(facts({**base, "time": {"budget_s": 60, "elapsed_s": 56, "spent_s": {"setup": 6.3, "trials": 35}, "trials_measured": 8}}))
    after = dict(facts({**base, "time": {"budget_s": 60, "elapsed_s": 57, "spent_s": {"setup": 6.3, "trials": 35, "writing": 1.5}, "trials_measured": 8}}))
    assert "56 s of a 60 s budget before the YAML and this report were written (setup" in before["time"]
    assert after["time"].startswith("57 s of a 60 s budget (setup")


@pytest.mark.slow
def test_the_winners_legend_says_how_many_measurements_its_figure_is(stored, tmp_path, monkeypatch):
    """The throughput plot called every winner "confirmed median", also where nothing was re-measured."""
    pytest.importorskip("matplotlib")
    from matplotlib.axes import Axes

    from autotune.report._plots import plot_throughput

    labels: list[str] = []
    real = Axes.scatter

    def scatter(self, *a, **kw):
        labels.append(str(kw.get("label")))
        return real(self, *a, **kw)

    monkeypatch.setattr(Axes, "scatter", scatter)
    study, url = stored
    ov = overview(study, url)
    plot_throughput(trial_rows(study), {**ov, "winner": {**ov["winner"], "scores": [200.0]}}, tmp_path / "one.png")
    plot_throughput(trial_rows(study), {**ov, "winner": {**ov["winner"], "scores": [190.0, 200.0, 210.0]}}, tmp_path / "three.png")
    assert "winner #5 (one measurement)" in labels and "winner #5 (median of 3 measurements)" in labels
    assert not any("confirmed" in label for label in labels)


@pytest.mark.slow
def test_a_repeat_is_not_drawn_as_a_failure(stored, tmp_path, monkeypatch):
    """A repeat (told an earlier trial's result, not measured) was a red cross at 0 samples/s, "not complete"."""
    pytest.importorskip("matplotlib")
    from matplotlib.axes import Axes

    from autotune.report._plots import plot_throughput

    drawn: dict[str, int] = {}
    real = Axes.scatter

    def scatter(self, x, y, *a, **kw):
        drawn[str(kw.get("label"))] = len(x)
        return real(self, x, y, *a, **kw)

    monkeypatch.setattr(Axes, "scatter", scatter)
    study, url = stored
    rows = trial_rows(study)
    repeat = {**rows[0], "trial": len(rows), "outcome": "repeat", "samples_per_s": None}
    plot_throughput([*rows, repeat], overview(study, url), tmp_path / "t.png")
    assert drawn.get("not complete (pruned/failed)", 0) == sum(r["outcome"] not in ("complete", "repeat") for r in rows)


def test_a_queued_trial_shows_the_config_it_was_queued_with():
    """Rows `queued, not run` (a warm start's neighbours, the defaults) had an empty config column."""
    study = optuna.create_study(direction="maximize")
    study.enqueue_trial(
        {"backend": "torch", "batch_size": 64}, user_attrs={"role": "defaults", "loader_params": {"backend": "torch", "batch_size": 64, "num_workers": 0}}
    )
    (row,) = trial_rows(study)
    assert row["state"] == "waiting" and row["config"] == "torch b=64 workers=0"


@pytest.mark.slow
def test_top_candidates_measured_once_are_not_headed_a_re_measurement(stored, tmp_path):
    """A run whose budget left no room for a round showed its single scores under 'Re-measurement of the top candidates'."""
    study, url = stored
    study.set_user_attr(
        "confirmation",
        {
            "method": "best single trial (no re-measurement)",
            "attempted": 0,
            "winner_trial": 5,
            "candidates": [
                {"trial": 5, "config": "dali", "scores": [200.0], "median": 200.0},
                {"trial": 6, "config": "dali", "scores": [170.0], "median": 170.0},
            ],
        },
    )
    folder = write_report(study, url, tmp_path / "reports")
    md, page = (folder / "report.md").read_text(), (folder / "report.html").read_text()
    assert "## The top candidates, each measured once" in md and ">The top candidates, each measured once</h2>" in page
    assert "Re-measurement of the top candidates" not in md + page


def test_a_planned_re_measurement_with_one_contender_says_nothing_was_re_measured():
    """A user Dataset's run said "room to re-measure the top 2 once" while its YAML said "best single trial (no
    re-measurement)": the one config within reach of the best had no other to be compared with."""
    from autotune.report._render import time_text

    t = {"elapsed_s": 45.0, "budget_s": 60.0, "spent_s": {"trials": 40.0}, "trials_measured": 7, "remeasured": {"top": 2, "repeats": 1}}
    assert time_text(t, "the YAML").endswith("room to re-measure the top 2 once")
    alone = time_text({**t, "remeasured": {"top": 2, "repeats": 1, "contenders": 1}}, "the YAML")
    assert alone.endswith("room to re-measure the top 2 once, but no other config reached a third of the best's rate: nothing was re-measured")


def test_the_re_measurement_table_shows_the_median_the_noise_rule_judged():
    """The demo's table showed the chosen config's median (with its trial's score) below the "slower" one's: the
    winner is judged on the re-measurements alone, and the table now says so in its own column."""
    from autotune.report._render import _tables

    conf = {"winner_trial": 0, "indistinguishable": [0], "candidates": [
        {"trial": 3, "config": "dali-cpu b=64", "scores": [840.0, 561.0], "median": 700.5},
        {"trial": 0, "config": "dali-cpu b=128", "scores": [523.0, 578.5], "median": 550.8}]}
    head, body = _tables({"confirmation": conf}, [], [])["confirmation"]
    assert head[3:6] == ["median of all", "median re-measured", "verdict"]
    assert [(row[0], row[4], row[5]) for row in body] == [("#3", "561", "slower"), ("#0", "578", "chosen")], body
