"""Markdown and self-contained HTML from the report's data and its plots.

The HTML embeds every image as a ``data:`` URI and carries its own style sheet, so the file alone renders
anywhere; the Markdown links the PNG files that lie beside it.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import json
import math
import statistics
from pathlib import Path
from typing import Any

from autotune.config.fingerprint import gpu_text
from autotune.dataset.paths import display
from autotune.outcomes import TOLD
from autotune.trials.guard import cores_taken, too_busy


@dataclasses.dataclass
class Figure:
    """One plot of the report: its section anchor, heading, PNG file name (None if not drawn) and caption."""

    key: str
    title: str
    file: str | None
    caption: str


def single_scores(method: object) -> bool:
    """Whether a confirmation ``method`` (its words, as the YAML's ``result.confirmed`` states them) re-measured nothing."""
    return str(method or "").startswith("best single trial")


def _confirmation_title(ov: dict) -> str:
    """The confirmation section's heading: a table of single scores is not called a re-measurement."""
    method = (ov.get("confirmation") or {}).get("method", "")
    return "The top candidates, each measured once" if single_scores(method) else "Re-measurement of the top candidates"


def _num(v: Any, nd: int = 0) -> str:
    if v is None or v == "":
        return "-"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float) and nd == 0 and abs(v) < 10 and not v.is_integer():
        return f"{v:.3g}"  # a factor such as max_slowdown 1.5, not rounded to 2
    if isinstance(v, (int, float)):
        return f"{v:,.{nd}f}"
    return str(v)


def _mib(v: Any) -> str:
    return "-" if v is None else f"{_num(v)} MiB"


def _spread(v: Any) -> str:
    return f"{_num(v[0])}-{_num(v[1])}" if isinstance(v, (list, tuple)) and len(v) == 2 else "-"


# The winner's figures, written the same way by the report and ``autotune show`` (the YAML's own numbers).
def fmt_rate(v: Any) -> str:
    """A samples/s figure as the YAML holds it (one decimal), e.g. ``3,631.0``."""
    return _num(v, 1) if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"


def fmt_spread(v: Any) -> str:
    """``spread: [lo, hi]`` as ``lo-hi`` at the YAML's precision."""
    return f"{fmt_rate(v[0])}-{fmt_rate(v[1])}" if isinstance(v, (list, tuple)) and len(v) == 2 else "-"


def fmt_speedup(v: Any) -> str:
    """A speedup as the YAML holds it (two decimals, no padding), e.g. ``1.79x``, ``5.0x``."""
    return f"{round(float(v), 2)!r}x" if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"


def _remeasure_plan(r: dict[str, Any]) -> str:
    """What the budget left for re-measurement (what was done is in the re-measurement section)."""
    def whole(v: Any) -> int:
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and abs(v) < 1e9 else 0

    top, repeats = whole(r.get("top")), whole(r.get("repeats"))
    if repeats <= 0 or top < 2:
        return ", no re-measurement planned"
    room = f", room to re-measure the top {top} {'once' if repeats == 1 else f'{repeats} times'}"
    if "contenders" in r and whole(r.get("contenders")) < 2:  # the others measured under a third of the best
        return room + ", but no other config reached a third of the best's rate: nothing was re-measured"
    return room


def _in_training(ov: dict[str, Any]) -> bool:
    """Scored inside the training loop (AutoLoader): the loop's rate, loader plus step, as ``studies`` marks it."""
    return isinstance(ov.get("measurement"), dict) and ov["measurement"].get("in_training") is True


def _measurement(m: dict[str, Any]) -> str:
    """The study's measurement settings as words (a flag as what it means, not Python's True)."""
    def word(k: str, v: Any) -> str:
        if k == "in_training":
            return "in the training loop" if v else "the loader alone"
        return f"{k} {'yes' if v else 'no'}" if isinstance(v, bool) else f"{k} {v}"

    return ", ".join(word(k, v) for k, v in m.items()) or "-"


def headline(ov: dict[str, Any]) -> list[tuple[str, str]]:
    """The key numbers: best rate, speedups, trials, failures."""
    w = ov.get("winner")
    failed = sum(v for k, v in ov["outcomes"].items() if k not in ("complete", "waiting", *TOLD))  # a repeat was told a result
    queued = ov["outcomes"].get("waiting", 0)
    out = [
        ("best samples/s" + (" (loop)" if _in_training(ov) else ""), fmt_rate(w["samples_per_s"]) if w else "none yet"),
        ("vs defaults", fmt_speedup(ov["speedups"].get("defaults"))),
        ("vs heuristic", fmt_speedup(ov["speedups"].get("heuristic"))),
        *([("vs DALI's usual", fmt_speedup(ov["speedups"].get("dali-heuristic")))] if "dali-heuristic" in (ov.get("baselines") or {}) else []),
        ("trials", f"{ov['trials']} ({ov['outcomes'].get('complete', 0)} completed"
                   + (f", {ov['outcomes']['repeat']} repeating an earlier config" if ov["outcomes"].get("repeat") else "")
                   + _told_apart(ov)
                   + f", {failed} not complete" + (f", {queued} queued and not run" if queued else "") + ")"),
    ]
    if w and w.get("fraction_of_ceiling") is not None:
        out.append(("of model ceiling", f"{float(w['fraction_of_ceiling']):.0%}"))
    return out


def _told_apart(ov: dict[str, Any]) -> str:
    """The trials told without a measurement, by why: a dominated kind, or a start that only comes later (its workers
    start otherwise than one that completed, and load alike)."""
    later = ov.get("later_start") or 0
    dominated = (ov["outcomes"].get("dominated") or 0) - later
    apart = ((dominated, "of a dominated kind"), (later, "starting workers later than a start that completed"))
    return "".join(f", {n} {what}, not measured" for n, what in apart if n)


def facts(ov: dict[str, Any]) -> list[tuple[str, str]]:
    """The study's context: what was measured, where, how."""
    w = ov.get("winner")
    d, h, m = ov["dataset"], ov["hardware"], ov["measurement"]
    rows = [
        ("winner", f"trial #{w['trial']}: {w['config']}" if w else "no completed trial yet"),
        ("winner loader", json.dumps(w["loader"], sort_keys=True) if w else "-"),
        (
            "winner evidence",
            f"scores {w['scores']}, spread {fmt_spread(w.get('spread'))}, "
            f"host peak {_mib(w.get('peak_host_mib'))}, GPU peak {_mib(w.get('peak_gpu_mib'))}, startup "
            + (f"{_num(w['startup_s'], 2)} s" if w.get("startup_s") is not None else "-")
            if w
            else "-",
        ),
        ("dataset", f"{d.get('path', '-')} ({_num(d.get('samples'))} images, {_num(d.get('classes'))} classes, mean {_num(d.get('mean_bytes'))} bytes)"),
        ("pipeline", f"{ov.get('pipeline') or '-'} on {ov.get('device') or '-'}" + (f", {ov['ranks']} ranks" if (ov.get("ranks") or 1) > 1 else "")),
        ("hardware", f"{gpu_text(h)}, {h.get('cpus', '-')} CPUs, {h.get('ram_gib', '-')} GiB RAM, torch {h.get('torch', '-')}, DALI {h.get('dali') or '-'}"),
        ("measurement", _measurement(m)),
        ("budgets", ", ".join(f"{k} {_num(v)}" for k, v in ov["budgets"].items()) or "-"),
        ("search", f"space {ov.get('space') or '-'}, sampler {ov.get('sampler') or '-'}, pruner {ov.get('pruner') or '-'}"),
        ("study", f"{ov['study']} in {ov['storage']}, started {ov.get('created') or '-'}"),
    ]
    load = ov.get("other_load")
    if load and load.get("cores") is not None:
        rows.append(("other jobs", other_jobs_text(load)))
    t = ov.get("time")
    if t:
        rows.append(("time", time_text(t, "the YAML and this report")))
    if ov.get("model"):
        rows.append(
            (
                "model",
                str(ov["model"])
                + (f"; ceiling {_num(ov['model_ceiling'])} samples/s" if ov.get("model_ceiling") else "")
                + (f" at batch {ov['model_ceiling_batch']}" if ov.get("model_ceiling_batch") else "")
                + (f" ({ov['model_ceiling_ranks']} ranks, one GPU each)" if (ov.get("model_ceiling_ranks") or 1) > 1 else ""),
            )
        )
    return rows


def other_jobs_text(load: dict[str, Any]) -> str:
    """The study's ``other_load`` in words: other jobs' cores during the run, and whether the figures moved with them."""
    of = load.get("cpus") or load.get("usable_cores")
    quota = f", {cores_taken(load):.1f} of the {_num(load.get('usable_cores'))} the run may use" if of != load.get("usable_cores") else ""
    return f"kept {float(load['cores']):.1f} of {_num(of)} cores busy during the run{quota}" + (" (the figures moved with them)" if too_busy(load) else "")


def time_text(t: dict[str, Any], written: str) -> str:
    """Where a run's time went (the study attr ``time``), as the report and ``autotune show --study`` say it;
    ``written``: what the run wrote after recording it (the report says "the YAML and this report")."""
    parts: dict[str, Any] = t["spent_s"] if isinstance(t.get("spent_s"), dict) else {}  # a hand-edited attribute is shown, never a crash
    spent = ", ".join(f"{k} {_num(v)} s" for k, v in parts.items())
    # recorded by `autotune run` before it wrote the YAML and the report: its "took" line adds their writing
    until = "" if "writing" in parts else f" before {written} were written"
    runs = t["runs"] if isinstance(t.get("runs"), (int, float)) and not isinstance(t.get("runs"), bool) else 1
    return (
        f"{_num(t.get('elapsed_s'))} s of a {_num(t.get('budget_s'))} s budget{until} ({spent}); "
        f"{_num(t.get('trials_measured'))} {'trial' if t.get('trials_measured') == 1 else 'trials'}"
        + (_remeasure_plan(t["remeasured"]) if isinstance(t.get("remeasured"), dict) else "")
        + (f"; the latest of {_num(runs)} runs of this study, after {_num(t.get('earlier_s'))} s in the earlier ones" if runs > 1 else "")
    )


TRIAL_COLUMNS = ("trial", "outcome", "role", "config", "samples/s", "spread", "host MiB", "GPU MiB", "startup s", "duration s")


#: outcomes as a person reads them where the stored name would mislead ("waiting": queued, then the budget ended)
OUTCOME_TEXT = {"waiting": "queued, not run"}


def outcome_text(outcome: str) -> str:
    return OUTCOME_TEXT.get(outcome, outcome)


def trial_cells(r: dict[str, Any], with_ceiling: bool) -> list[str]:
    cells = [
        str(r["trial"]),
        outcome_text(r["outcome"]),
        r["role"] or "",
        r["config"],
        _num(r["samples_per_s"]),
        _spread(r["spread"]),
        _num(r["peak_host_mib"]),
        _num(r["peak_gpu_mib"]),
        _num(r["startup_s"], 2),
        _num(r["duration_s"], 1),
    ]
    if with_ceiling:
        cells.append(f"{float(r['fraction_of_ceiling']):.0%}" if r["fraction_of_ceiling"] is not None else "-")
    return cells


class Link(str):
    """A table cell that links to a file (a trial's log): a link in Markdown and HTML, plain text elsewhere."""


def _log_cell(r: dict[str, Any]) -> str:
    return Link(r["log"]) if r.get("log") else "-"


def _tables(ov: dict[str, Any], rows: list[dict[str, Any]], failures: list[dict[str, Any]]) -> dict[str, tuple[list[str], list[list[str]]]]:
    with_ceiling = any(r["fraction_of_ceiling"] is not None for r in rows)
    out = {
        "failures": (
            ["outcome", "count", "trials", "first message"],
            [[g["outcome"], str(g["count"]), ", ".join(f"#{n}" for n in g["trials"]), g["message"][:200]] for g in failures],
        ),
        "trials": (list(TRIAL_COLUMNS) + (["of ceiling"] if with_ceiling else []) + ["log"], [[*trial_cells(r, with_ceiling), _log_cell(r)] for r in rows]),
    }
    conf = ov.get("confirmation")
    if conf:
        alike = conf.get("indistinguishable")

        def verdict(n: Any) -> list[str]:  # the noise rule's word on each candidate, where it judged them
            if not isinstance(alike, list):
                return []
            return ["chosen" if n == conf.get("winner_trial") else "cannot be told apart" if n in alike else "slower"]

        def again(c: dict[str, Any]) -> str:  # the noise rule judges the re-measurements alone: the trial's score is why it was picked
            scores = [v for v in (c.get("scores") or [])[1:] if isinstance(v, (int, float)) and not isinstance(v, bool)]
            return _num(statistics.median(scores)) if scores else "-"

        out["confirmation"] = (
            ["trial", "config", "scores (the trial's first)", "median of all", "median re-measured", *(["verdict"] if isinstance(alike, list) else [])],
            [
                [f"#{c['trial']}", str(c.get("config")), ", ".join(_num(s) for s in c.get("scores", [])), _num(c.get("median")), again(c),
                 *verdict(c["trial"])]
                for c in conf.get("candidates", [])
            ],
        )
    return out


DASHBOARD = "optuna-dashboard {storage}"


def _dashboard(ov: dict[str, Any]) -> str:
    return DASHBOARD.format(storage=ov["storage"])


# ------------------------------------------------------------------------------------------------ markdown
def _md_escape(s: str) -> str:
    text = display(s).replace("|", "\\|")  # control characters (a newline too) as \xNN: one table row
    return f"[{text}](<{s}>)" if isinstance(s, Link) and not any(c in s for c in "<>|\n") else text


def _md_table(head: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in body]
    return "\n".join(lines)


def markdown(ov: dict[str, Any], rows: list[dict[str, Any]], failures: list[dict[str, Any]], figures: list[Figure], notes: list[str]) -> str:
    tables = _tables(ov, rows, failures)
    out = [f"# autotune report: {display(ov['study'])}", ""]
    out += [" · ".join(f"**{k}** {v}" for k, v in headline(ov)), ""]
    out += ["## Summary", "", _md_table(["", ""], [[k, v] for k, v in facts(ov)]), ""]
    for n in notes:
        out += [f"> {n}", ""]
    for f in figures:
        out += [f"## {f.title}", ""]
        if f.file:
            out += [f"![{f.title}]({f.file})", ""]
        out += [f.caption, ""]
    out += ["## Failures by outcome", ""]
    out += [_md_table(*tables["failures"]) if failures else "Every trial completed.", ""]
    if "confirmation" in tables:
        out += [f"## {_confirmation_title(ov)}", "", ov["confirmation"].get("method", ""), "", _md_table(*tables["confirmation"]), ""]
    out += ["## All trials", "", _md_table(*tables["trials"]), ""]
    out += [
        "## Explore the study",
        "",
        "The study opens as is in optuna-dashboard (`pip install optuna-dashboard`); "
        "each trial's user attributes hold the outcome, samples/s, spread and memory peaks:",
        "",
        "```",
        _dashboard(ov),
        "```",
        "",
    ]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------------- html
CSS = """
body{font-family:-apple-system,"Segoe UI",Roboto,"DejaVu Sans",Helvetica,Arial,sans-serif;margin:0;background:#f5f6f8;color:#222}
main{max-width:1100px;margin:0 auto;padding:24px 28px 60px}
h1{font-size:26px;margin:8px 0 4px}h2{font-size:19px;margin:34px 0 10px;border-bottom:2px solid #e1e4e8;padding-bottom:4px}
.sub{color:#666;margin-bottom:18px;font-size:14px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:14px 0 8px}
.card{background:#fff;border-radius:8px;box-shadow:0 1px 3px rgba(0,0,0,.12);padding:12px 18px;min-width:150px}
.card .k{font-size:12px;color:#666;text-transform:uppercase;letter-spacing:.04em}.card .v{font-size:24px;font-weight:600;margin-top:2px}
table{border-collapse:collapse;background:#fff;font-size:13px;width:100%;box-shadow:0 1px 2px rgba(0,0,0,.08)}
th,td{border-bottom:1px solid #e6e8eb;padding:5px 8px;text-align:left;vertical-align:top}th{background:#f0f2f5;font-weight:600}
table.trials td:nth-child(n+5){white-space:nowrap}table.facts td:first-child{font-weight:600;white-space:nowrap;width:150px}
tr.fail td{color:#a93226}tr.win td{background:#fff8dc}
figure{background:#fff;border-radius:8px;box-shadow:0 1px 3px rgba(0,0,0,.12);margin:0;padding:12px}
figure img{max-width:100%;height:auto;display:block;margin:0 auto}figcaption{color:#555;font-size:13px;margin-top:6px}
.note{background:#fff4e5;border-left:4px solid #f0a020;padding:8px 12px;margin:8px 0;font-size:13px}
nav{font-size:13px;margin:6px 0 0}nav a{margin-right:12px;color:#2a62b8;text-decoration:none}
code,pre{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:13px}
pre{background:#272822;color:#f8f8f2;padding:10px 14px;border-radius:6px;overflow-x:auto}
"""


def _e(s: Any) -> str:
    return html.escape(str(s), quote=True)


def _html_table(head: list[str], body: list[list[str]], cls: str = "", row_classes: list[str] | None = None) -> str:
    out = [f'<table class="{cls}">' if cls else "<table>"]
    if head:
        out.append("<thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr></thead>")
    out.append("<tbody>")
    for i, row in enumerate(body):
        rc = row_classes[i] if row_classes else ""
        out.append(
            (f'<tr class="{rc}">' if rc else "<tr>")
            + "".join(f'<td><a href="{_e(c)}">{_e(c)}</a></td>' if isinstance(c, Link) else f"<td>{_e(c)}</td>" for c in row)
            + "</tr>"
        )
    out.append("</tbody></table>")
    return "\n".join(out)


def _img(folder: Path, file: str, alt: str) -> str:
    data = base64.b64encode((folder / file).read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{_e(alt)}" data-file="{_e(file)}">'


def html_page(ov: dict[str, Any], rows: list[dict[str, Any]], failures: list[dict[str, Any]], figures: list[Figure], notes: list[str], folder: Path) -> str:
    """The report as one HTML file; ``folder`` holds the PNGs, which are embedded."""
    tables = _tables(ov, rows, failures)
    w = ov.get("winner")
    sections = (
        [("summary", "Summary")]
        + [(f.key, f.title) for f in figures]
        + [("failures", "Failures")]
        + ([("confirmation", "Re-measurement")] if "confirmation" in tables else [])
        + [("trials", "All trials"), ("explore", "Explore")]
    )
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>autotune report: {_e(ov['study'])}</title>",
        f"<style>{CSS}</style></head><body><main>",
        f"<h1>autotune report: {_e(ov['study'])}</h1>",
        f'<div class="sub">{_e((ov["dataset"] or {}).get("path", ""))} · {_e(ov.get("pipeline") or "")} on {_e(ov.get("device") or "")} · '
        f'created {_e(ov.get("created") or "-")}</div>',
        "<nav>" + "".join(f'<a href="#{k}">{_e(t)}</a>' for k, t in sections) + "</nav>",
        '<div class="cards">'
        + "".join(f'<div class="card"><div class="k">{_e(k)}</div><div class="v">{_e(v)}</div></div>' for k, v in headline(ov))
        + "</div>",
        '<h2 id="summary">Summary</h2>',
        _html_table([], [[k, v] for k, v in facts(ov)], cls="facts"),
    ]
    out += [f'<div class="note">{_e(n)}</div>' for n in notes]
    for f in figures:
        out.append(f'<h2 id="{_e(f.key)}">{_e(f.title)}</h2><figure>')
        if f.file:
            out.append(_img(folder, f.file, f.title))
        out.append(f"<figcaption>{_e(f.caption)}</figcaption></figure>")
    out.append('<h2 id="failures">Failures by outcome</h2>')
    out.append(_html_table(*tables["failures"]) if failures else "<p>Every trial completed.</p>")
    if "confirmation" in tables:
        out += [
            f'<h2 id="confirmation">{_e(_confirmation_title(ov))}</h2>',
            f"<p>{_e(ov['confirmation'].get('method', ''))}</p>",
            _html_table(*tables["confirmation"]),
        ]
    win_no = w["trial"] if w else None
    classes = ["win" if r["trial"] == win_no else ("fail" if r["outcome"] not in ("complete", *TOLD) else "") for r in rows]
    out += ['<h2 id="trials">All trials</h2>', _html_table(*tables["trials"], cls="trials", row_classes=classes)]
    out += [
        '<h2 id="explore">Explore the study</h2>',
        "<p>The study opens as is in optuna-dashboard (<code>pip install optuna-dashboard</code>); "
        "each trial's user attributes hold the outcome, samples/s, spread and memory peaks:</p>",
        f"<pre>{_e(_dashboard(ov))}</pre>",
        "</main></body></html>",
    ]
    return "\n".join(out) + "\n"
