"""The report's PNG plots, drawn with matplotlib's Agg canvas (no pyplot, no display, no global state).

Each ``plot_*`` function takes the rows and overview from :mod:`autotune.report._data`, writes one PNG and
returns a one-line caption. A plot that has nothing to show says so in the image instead of failing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.outcomes import TOLD
from autotune.report._data import BASELINE_ROLES, KEY_KNOBS, MEMORY_OUTCOMES
from autotune.report._render import fmt_speedup

BACKEND_COLOURS = {"torch": "#ee4c2c", "dali": "#76b900"}
OTHER = "#4c72b0"
FAIL = "#c0392b"
GREY = "#8c8c8c"


def _figure(width: float = 9.0, height: float = 4.2, **kwargs: Any):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained", **kwargs)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> None:
    fig.savefig(path, format="png", dpi=100, facecolor="white")


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color=GREY, fontsize=11)
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)


def _colour(backend: str | None) -> str:
    return BACKEND_COLOURS.get(backend or "", OTHER)


def _style(ax: Any) -> None:
    ax.grid(True, alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)


def plot_throughput(rows: list[dict[str, Any]], ov: dict[str, Any], path: Path) -> str:
    """Samples/s of each trial against the time it finished, the running best, failures at zero. Trials queued and
    never run (the budget ended first) have no time and no result: they are counted in the caption, not drawn."""
    fig = _figure(9.5, 4.4)
    ax = fig.add_subplot()
    _style(ax)
    queued = sum(1 for r in rows if r["start"] is None and r["outcome"] in ("waiting", "queued"))
    rows = [r for r in rows if not (r["start"] is None and r["outcome"] in ("waiting", "queued"))]
    starts = [r["start"] for r in rows if r["start"] is not None]
    t0 = min(starts) if starts else None

    def x_of(r: dict[str, Any]) -> float:
        when = r["end"] or r["start"]
        return (when - t0).total_seconds() / 60.0 if (t0 is not None and when is not None) else float(r["trial"])

    timed = t0 is not None
    done = sorted(rows, key=x_of)
    best, bx, by = 0.0, [], []
    for r in done:
        if r["outcome"] == "complete" and r["samples_per_s"]:
            best = max(best, r["samples_per_s"])
            bx.append(x_of(r))
            by.append(best)
    if bx:
        ax.step(bx, by, where="post", color="#333333", lw=1.6, label="running best", zorder=2)
    for backend in sorted({r["backend"] or "?" for r in rows}):
        pts = [r for r in rows if (r["backend"] or "?") == backend and r["outcome"] == "complete" and r["samples_per_s"]]
        if pts:
            ax.scatter([x_of(r) for r in pts], [r["samples_per_s"] for r in pts], s=46, color=_colour(backend), label=f"{backend}", zorder=3, edgecolor="white")
    fails = [r for r in rows if r["outcome"] not in ("complete", *TOLD)]  # a repeat is told its earlier result, not measured
    if fails:
        ax.scatter(
            [x_of(r) for r in fails], [r["samples_per_s"] or 0.0 for r in fails], marker="x", s=46, color=FAIL, label="not complete (pruned/failed)", zorder=3
        )
    for r in rows:
        if r["role"] in BASELINE_ROLES and r["samples_per_s"]:
            ax.annotate(r["role"], (x_of(r), r["samples_per_s"]), textcoords="offset points", xytext=(6, 6), fontsize=8, color="#555555")
    w = ov.get("winner")
    if w and w.get("samples_per_s"):
        ax.scatter(
            [x_of(w)],
            [w["samples_per_s"]],
            marker="*",
            s=260,
            color="#f1c40f",
            edgecolor="#333333",
            label=f"winner #{w['trial']} " + (f"(median of {len(w['scores'])} measurements)" if len(w.get("scores") or ()) > 1 else "(one measurement)"),
            zorder=4,
        )
    if ov.get("model_ceiling"):
        ax.axhline(ov["model_ceiling"], ls="--", color="#8e44ad", lw=1.2, label=f"model ceiling {ov['model_ceiling']:,.0f}/s")
    if not rows:
        _empty(ax, "no trials yet")
    else:
        ax.set_xlabel("minutes since the first trial started" if timed else "trial number")
        ax.set_ylabel("samples/s")
        ax.set_ylim(bottom=0)
        ax.margins(x=0.12)  # room for a baseline's label beside a point at either edge
        ax.legend(loc="best", fontsize=8, framealpha=0.9)  # where it hides the fewest points (a slow default sits low)
    ax.set_title("Throughput per trial over time, with the running best")
    _save(fig, path)
    n_ok = sum(1 for r in rows if r["outcome"] == "complete")
    n_rep = sum(1 for r in rows if r["outcome"] == "repeat")
    n_later = ov.get("later_start") or 0  # of the dominated ones: a start that only comes later
    n_dom = sum(1 for r in rows if r["outcome"] == "dominated") - n_later
    repeats = f" ({n_rep} more repeating an earlier config, not measured again)" if n_rep else ""
    repeats += f" ({n_dom} more of a dominated kind, not measured)" if n_dom else ""
    repeats += f" ({n_later} more starting workers later than a start that completed, not measured)" if n_later else ""
    not_run = f" {queued} more queued, not run (the budget ended first)." if queued else ""
    return (
        f"{n_ok} of {len(rows)} {'trial' if len(rows) == 1 else 'trials'} completed{repeats}; "
        f"the fastest trial measured {best:,.0f} samples/s (the re-measurements are in the winner's evidence)." + not_run
        if bx
        else "No trial completed." + not_run
    )


def plot_backends(rows: list[dict[str, Any]], ov: dict[str, Any], path: Path) -> str:
    """A box of the completed trials' samples/s per backend, each trial a dot."""
    fig = _figure(6.5, 4.0)
    ax = fig.add_subplot()
    _style(ax)
    groups: dict[str, list[float]] = {}
    for r in rows:
        if r["outcome"] == "complete" and r["samples_per_s"]:
            groups.setdefault(r["backend"] or "?", []).append(r["samples_per_s"])
    names = sorted(groups)
    if not names:
        _empty(ax, "no completed trial")
    else:
        ax.boxplot([groups[n] for n in names], widths=0.5, showfliers=False, medianprops={"color": "#333333"})
        ax.set_xticks(range(1, len(names) + 1), names)
        for i, n in enumerate(names, start=1):
            vals = groups[n]
            xs = [i + (j - (len(vals) - 1) / 2) * min(0.3 / max(len(vals), 1), 0.06) for j in range(len(vals))]
            ax.scatter(xs, vals, color=_colour(n), s=36, zorder=3, edgecolor="white")
            ax.annotate(
                f"best {max(vals):,.0f}/s\n{len(vals)} {'trial' if len(vals) == 1 else 'trials'}",
                (i, max(vals)),
                textcoords="offset points",
                xytext=(0, 8),
                ha="center",
                fontsize=8,
            )
        ax.set_ylabel("samples/s")
        ax.set_ylim(0, max(max(v) for v in groups.values()) * 1.25)
    ax.set_title("Throughput by backend (completed trials)")
    _save(fig, path)
    return (
        ", ".join(f"{n}: best {max(groups[n]):,.0f}/s over {len(groups[n])} {'trial' if len(groups[n]) == 1 else 'trials'}" for n in names)
        or "No completed trial."
    )


def _knob_order(rows: list[dict[str, Any]], imps: list[dict[str, Any]]) -> list[str]:
    present: set[str] = set()
    for r in rows:
        if r["outcome"] == "complete":
            present.update(k for k in (r["loader"] or {}) if k != "backend")
    ranked: dict[str, float] = {}
    for imp in imps:
        for k, v in imp["values"].items():
            ranked[k] = max(ranked.get(k, 0.0), v)
    knobs = [k for k in KEY_KNOBS if k in present]
    others = sorted((k for k in present if k not in knobs), key=lambda k: (-ranked.get(k, -1.0), k))
    varied = [k for k in others if len({repr(r["loader"].get(k)) for r in rows if r["outcome"] == "complete" and r["loader"] and k in r["loader"]}) > 1]
    return (knobs + varied)[:4]


def plot_knobs(rows: list[dict[str, Any]], imps: list[dict[str, Any]], path: Path) -> str:
    """Samples/s against num_workers, num_threads and the most important other knobs: best per value as a curve."""
    knobs = _knob_order(rows, imps)
    n = max(1, len(knobs))
    cols = 2 if n > 1 else 1
    nrows = (n + cols - 1) // cols
    fig = _figure(9.5 if cols == 2 else 6.5, 3.4 * nrows)
    axes = fig.subplots(nrows, cols, squeeze=False).ravel()
    if not knobs:
        _empty(axes[0], "no completed trial")
    for ax, knob in zip(axes, knobs, strict=False):
        _style(ax)
        pts = [
            (r["loader"][knob], r["samples_per_s"], r["backend"])
            for r in rows
            if r["outcome"] == "complete" and r["samples_per_s"] and r["loader"] and knob in r["loader"]
        ]
        values = sorted({p[0] for p in pts}, key=lambda v: (isinstance(v, str), v if not isinstance(v, str) else 0, str(v)))
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        pos = {v: (v if numeric else i) for i, v in enumerate(values)}
        for backend in sorted({p[2] or "?" for p in pts}):
            sel = [p for p in pts if (p[2] or "?") == backend]
            ax.scatter([pos[p[0]] for p in sel], [p[1] for p in sel], color=_colour(backend), alpha=0.55, s=30, label=backend)
            best: dict[Any, float] = {}
            for v, rate, _ in sel:
                best[v] = max(best.get(v, 0.0), rate)
            xs = sorted(best, key=lambda v: pos[v])
            ax.plot([pos[v] for v in xs], [best[v] for v in xs], "-o", color=_colour(backend), lw=1.8, ms=4)
        if not numeric:
            ax.set_xticks([pos[v] for v in values], [str(v) for v in values])
        elif len(values) <= 12:
            ax.set_xticks(values)
            if len(values) == 1:
                ax.set_xlim(values[0] - 1, values[0] + 1)
        ax.set_xlabel(knob)
        ax.set_ylabel("samples/s")
        ax.set_ylim(bottom=0)
        ax.set_title(f"{knob} (line: best at each value)", fontsize=10)
        if len({p[2] for p in pts}) > 1:
            ax.legend(fontsize=8)
    for ax in axes[len(knobs) or 1 :]:
        ax.set_visible(False)
    fig.suptitle("Throughput by knob")
    _save(fig, path)
    return "Knobs shown: " + (", ".join(knobs) if knobs else "none") + "."


def plot_importance(imps: list[dict[str, Any]], notes: list[str], path: Path) -> str:
    """Horizontal bars of parameter importance, one panel per scope (all trials, each backend)."""
    n = max(1, len(imps))
    fig = _figure(min(4.2 * n + 1.0, 13.0), 3.6)
    axes = fig.subplots(1, n, squeeze=False).ravel()
    if not imps:
        _empty(axes[0], "parameter importance not available\n(" + (notes[0][:90] if notes else "too few trials") + ")")
    for ax, imp in zip(axes, imps, strict=False):
        items = sorted(imp["values"].items(), key=lambda kv: kv[1])
        ax.barh([k for k, _ in items], [v for _, v in items], color=OTHER)
        for y, (_, v) in enumerate(items):
            ax.text(v, y, f" {v:.2f}", va="center", fontsize=8)
        ax.set_xlim(0, max([v for _, v in items] + [0.01]) * 1.25)
        ax.set_title(f"{imp['scope']} ({imp['method']}, {imp['trials']} trials)", fontsize=10)
        ax.set_xlabel("importance")
        ax.spines[["top", "right"]].set_visible(False)
    fig.suptitle("Parameter importance")
    _save(fig, path)
    return (
        "; ".join(f"{i['scope']}: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(i["values"].items(), key=lambda kv: -kv[1])[:3]) for i in imps)
        or "Not available."
    )


def plot_baselines(ov: dict[str, Any], path: Path) -> str:
    """The winner against the framework defaults and the common heuristic, with the speedup on each bar."""
    fig = _figure(7.5, 4.0)
    ax = fig.add_subplot()
    _style(ax)
    bars: list[tuple[str, float, list[float] | None, str]] = []
    for role in BASELINE_ROLES:
        b = ov["baselines"].get(role)
        if b and b.get("samples_per_s"):
            bars.append((f"{role}\n#{b['trial']}", b["samples_per_s"], b.get("spread"), GREY))
    w = ov.get("winner")
    if w:
        bars.append((f"winner\n#{w['trial']}", w["samples_per_s"], w.get("spread"), _colour(w.get("backend"))))
    if not bars:
        _empty(ax, "no baseline and no winner to compare")
    else:
        ref = ov["baselines"].get("defaults", {}).get("samples_per_s")  # each bar's speedup is against the defaults, if measured
        xs = range(len(bars))
        heights = [b[1] for b in bars]
        err = [[max(0.0, b[1] - (b[2][0] if b[2] else b[1])) for b in bars], [max(0.0, (b[2][1] if b[2] else b[1]) - b[1]) for b in bars]]
        ax.bar(xs, heights, color=[b[3] for b in bars], yerr=err, capsize=5, width=0.6, error_kw={"ecolor": "#444444"})
        for x, b in zip(xs, bars, strict=False):
            label = f"{b[1]:,.0f}/s" + (f"\n{fmt_speedup(b[1] / ref)} vs defaults" if ref else "")
            ax.text(x, b[1] + err[1][x] + max(heights) * 0.02, label, ha="center", va="bottom", fontsize=9)
        ax.set_xticks(list(xs), [b[0] for b in bars])
        ax.set_ylim(0, max(h + e for h, e in zip(heights, err[1], strict=False)) * 1.3)
        ax.set_ylabel("samples/s")
    sp = ov.get("speedups") or {}
    extra = ", ".join(f"{fmt_speedup(v)} vs {k}" for k, v in sp.items())
    ax.set_title("Winner against the baselines" + (f"\n({extra})" if extra else ""), fontsize=10)  # two lines: three ratios fit the width
    _save(fig, path)
    return (
        ("Speedup " + extra + "; bars: median, whiskers: spread of the measurements.") if extra else "No speedup to show (a baseline or the winner is missing)."
    )


def plot_memory(rows: list[dict[str, Any]], ov: dict[str, Any], path: Path) -> str:
    """Host (and GPU) memory peak per trial against the budget; memory failures in red."""
    budgets = ov.get("budgets") or {}
    kinds = [("peak_host_mib", "host", budgets.get("host_mib"))]
    if any(r["peak_gpu_mib"] for r in rows) or budgets.get("gpu_mib"):
        kinds.append(("peak_gpu_mib", "GPU", budgets.get("gpu_mib")))
    fig = _figure(9.5, 3.2 * len(kinds))
    axes = fig.subplots(len(kinds), 1, squeeze=False).ravel()
    notes = []
    for ax, (key, label, budget) in zip(axes, kinds, strict=False):
        _style(ax)
        xs = [r["trial"] for r in rows]
        ys = [r[key] or 0.0 for r in rows]
        colours = [FAIL if r["outcome"] in MEMORY_OUTCOMES else (OTHER if r["outcome"] == "complete" else GREY) for r in rows]
        if not rows:
            _empty(ax, "no trials")
            continue
        if not any(ys):  # AutoLoader's candidates run in the training process: no peak of their own
            _empty(ax, f"no {label} memory peak recorded")
            continue
        ax.bar(xs, ys, color=colours, width=0.7)
        if budget:
            ax.axhline(budget, ls="--", color=FAIL, lw=1.3)
            ax.text(0.995, budget, f"budget {budget:,.0f} MiB", transform=ax.get_yaxis_transform(), ha="right", va="bottom", fontsize=8, color=FAIL)
            ax.set_ylim(0, max(ys + [budget]) * 1.15)
        else:
            notes.append(f"no {label} budget set")
            ax.set_ylim(0, max(ys + [1.0]) * 1.15)
        ax.set_ylabel(f"{label} peak (MiB)")
        ax.set_title(f"{label} memory peak per trial" + ("" if budget else " (no budget set)"), fontsize=10)
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[-1].set_xlabel("trial (blue: complete, red: stopped for memory, grey: other outcomes)")
    _save(fig, path)
    peaks = [r["peak_host_mib"] for r in rows if r["peak_host_mib"]]
    return (f"Highest host peak {max(peaks):,.0f} MiB" if peaks else "No memory peak recorded") + ("; " + "; ".join(notes) if notes else "") + "."
