"""``keel evaluate``'s plots (matplotlib, PNG), embedded in ``report.html`` as data URIs so
the report reads offline as one file; the PNGs are written beside it too."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from orchestrator.domain.model.errors import ConfigError

__all__ = ["plot_all", "require_matplotlib"]

#: How to get the plots' library: an extra, so the product does not carry it.
INSTALL = "pip install 'keel[evaluate]'"


def require_matplotlib() -> None:
    """``keel evaluate`` needs matplotlib (the ``[evaluate]`` extra): say so before any
    batch runs, not after minutes of runs."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise ConfigError(f"keel evaluate draws its plots with matplotlib; install it: {INSTALL}")


def plot_all(out: Path, classes: list[dict[str, Any]]) -> dict[str, str]:
    """Write each plot to ``out``; {name: data URI} for the HTML."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display
    plots = {
        "latency.png": _latency(classes),
        "outcomes.png": _outcomes(classes),
        "cost.png": _cost(classes),
        "backlog.png": _backlog(classes),
        "kafka_lag.png": _kafka_lag(classes),
    }
    uris = {}
    for name, png in plots.items():
        (out / name).write_bytes(png)
        uris[name] = "data:image/png;base64," + base64.b64encode(png).decode()
    return uris


def _label(c: dict[str, Any]) -> str:
    return f"{c['fault']}\n({c['variant']})"


def _png(fig: Any) -> bytes:
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def _latency(classes: list[dict[str, Any]]) -> bytes:
    """End-to-end time per fault class: each run that ended a dot, over a box of its
    quartiles (whiskers to the farthest run within 1.5 box lengths)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(7.5, 1.1 * len(classes)), 3.8))
    names = [_label(c) for c in classes]
    runs = [c["end_to_end_runs_s"] or [0.0] for c in classes]
    ax.boxplot(runs, showfliers=False, widths=0.5)
    for i, times in enumerate(runs, 1):
        spread = [i + 0.18 * ((k % 5) - 2) / 2 for k in range(len(times))]
        ax.scatter(spread, times, s=9, alpha=0.6, zorder=3)
    ax.set_xticks(range(1, len(names) + 1), names, rotation=0, fontsize=7)
    ax.set_ylabel("seconds, start to end")
    ax.set_title("End-to-end time by fault class (a dot per run that ended)")
    return _png(fig)


def _outcomes(classes: list[dict[str, Any]]) -> bytes:
    """Runs per outcome, stacked, per fault class."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(7.5, 1.1 * len(classes)), 3.8))
    names = [_label(c) for c in classes]
    kinds = sorted({k for c in classes for k in c["outcomes"]})
    bottom = [0] * len(classes)
    for kind in kinds:
        values = [c["outcomes"].get(kind, 0) for c in classes]
        ax.bar(names, values, bottom=bottom, label=kind)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_ylabel("runs")
    ax.set_title("Outcomes by fault class")
    ax.tick_params(axis="x", labelsize=7)
    ax.legend(fontsize=8, ncols=2)
    return _png(fig)


def _cost(classes: list[dict[str, Any]]) -> bytes:
    """Model cost per successful task, per fault class."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(7.5, 1.1 * len(classes)), 3.4))
    names = [_label(c) for c in classes]
    ax.bar(names, [c["cost_per_successful_task_usd"] or 0.0 for c in classes])
    ax.set_ylabel("USD per successful run")
    ax.set_title("Model cost per successful task")
    ax.tick_params(axis="x", labelsize=7)
    return _png(fig)


def _backlog(classes: list[dict[str, Any]]) -> bytes:
    """Runs waiting for a retry over time, one line per batch (from the histories)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    for c in classes:
        series = c["queue_backlog"]["series"]
        if series and any(n for _, n in series):
            ax.step([t for t, _ in series], [n for _, n in series], where="post", label=_label(c))
    ax.set_xlabel("seconds since the batch's first run started")
    ax.set_ylabel("runs waiting for a retry")
    ax.set_title("Backlog over time")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    return _png(fig)


def _kafka_lag(classes: list[dict[str, Any]]) -> bytes:
    """Records Kafka holds for the batch's consumers (every topic and group summed) over
    time: a panel per variant, a line per fault class's batch."""
    import matplotlib.pyplot as plt

    variants = list(dict.fromkeys(c["variant"] for c in classes))
    fig, axes = plt.subplots(
        len(variants), 1, figsize=(8.5, 2.6 * len(variants)), sharex=True, squeeze=False
    )
    for ax, variant in zip(axes[:, 0], variants, strict=True):
        for c in classes:
            series = c["queue_backlog"]["kafka_lag"]["series"]
            if c["variant"] == variant and series:
                totals = [sum(lag.values()) for _, lag in series]
                ax.plot([t for t, _ in series], totals, ".-", label=c["fault"], lw=1.2, ms=3)
        ax.set_title(f"Kafka consumer lag over time: {variant}", fontsize=9)
        ax.set_ylabel("records not committed", fontsize=8)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes[-1, 0].set_xlabel("seconds since the batch's first run started")
    return _png(fig)
