"""PNG plots of a result object (matplotlib, Agg backend), written next to the doc.

Every plot shows medians over reps with the range across reps as error bars where the
figure has one. Each plot belongs to one part (``PLOTS``); the caller asks only for the
parts that ran, so the plots of a part that did not run are left as they were.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from peers import LIBRARIES
from report import counts_in

COLOURS = {
    "redlease": "#c0392b",
    "redis-py": "#2c3e50",
    "python-redis-lock": "#27ae60",
    "pottery": "#8e44ad",
    "aioredlock": "#d68910",
}
MARKERS = {"redlease": "o", "redis-py": "s", "python-redis-lock": "^", "pottery": "D"}
DPI = 110


def _pyplot() -> Any:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def _errors(value: float | None, spread: list[float] | None) -> list[float]:
    """``[below, above]`` error-bar lengths around a median from its ``[min, max]``."""
    if value is None or not spread:
        return [0.0, 0.0]
    return [max(0.0, value - spread[0]), max(0.0, spread[1] - value)]


def _contended(result: dict[str, Any], library: str, key: str) -> tuple[list[int], Any, Any]:
    """Worker counts, medians and error bars of one nested contended figure."""
    nested = result.get(library, {}).get("contended", {})
    xs, ys, low, high = [], [], [], []
    for workers in sorted(nested, key=int):
        value = nested[workers].get(key)
        if value is None:
            continue
        below, above = _errors(value, nested[workers].get(f"{key}_spread"))
        xs.append(int(workers))
        ys.append(value)
        low.append(below)
        high.append(above)
    return xs, ys, [low, high]


def _scaling_panel(ax: Any, result: dict[str, Any], key: str, title: str, log: bool) -> None:
    for library in LIBRARIES:
        xs, ys, errors = _contended(result, library, key)
        if xs:
            ax.errorbar(
                xs,
                ys,
                yerr=errors,
                label=library,
                color=COLOURS[library],
                marker=MARKERS[library],
                capsize=3,
            )
    workers = counts_in(result, "contended")
    ax.set_xscale("log", base=2)
    ax.set_xticks(workers, [str(w) for w in workers])
    ax.set_xlabel("worker processes on one key")
    ax.set_title(title)
    if log:
        ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)


def handoff(result: dict[str, Any], plt: Any) -> Any:
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    _scaling_panel(axes[0], result, "handoff_p50_us", "handoff p50, µs (log)", log=True)
    _scaling_panel(axes[1], result, "handoff_p99_us", "handoff p99, µs (log)", log=True)
    axes[0].legend(fontsize=8)
    figure.suptitle("Contended handoff: release by one process → acquire by another")
    return figure


def contention(result: dict[str, Any], plt: Any) -> Any:
    figure, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    _scaling_panel(axes[0], result, "acquires_per_s", "acquisitions / s", log=False)
    _scaling_panel(axes[1], result, "commands_per_acquire", "server commands / acq.", log=False)
    _scaling_panel(axes[2], result, "handoff_share", "share handed to another process", False)
    axes[0].legend(fontsize=8)
    figure.suptitle("One hot key: throughput, commands, fairness vs contenders")
    return figure


def renewal(result: dict[str, Any], plt: Any) -> Any:
    figure, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    panels = (
        ("renew_threads", "threads added (log)", True),
        ("renew_cpu_pct", "CPU, % of one core", False),
        ("lost_pct", "leases lost, % of held", False),
    )
    counts = counts_in(result, "renewal_by_leases")
    for ax, (key, title, log) in zip(axes, panels, strict=True):
        for library, nested, style in RENEWAL_SERIES:
            xs, ys = _renewal_series(result, library, nested, key, counts)
            if xs:
                name = library if nested == "renewal_by_leases" else f"{library} (big pool)"
                colour, marker = COLOURS[library], MARKERS[library]
                ax.plot(xs, ys, style, label=name, color=colour, marker=marker)
        if key == "lost_pct":
            ax.set_ylim(-3, 103)
        ax.set_xscale("log")
        ax.set_xticks(counts, [f"{count:,}" for count in counts])
        ax.set_xlabel("leases held at once")
        ax.set_title(title)
        if log:
            ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    figure.suptitle("Automatic renewal of many held leases (ttl 3 s)")
    return figure


RENEWAL_SERIES = (
    ("redlease", "renewal_by_leases", "-"),
    ("python-redis-lock", "renewal_by_leases", "-"),
    ("python-redis-lock", "renewal_big_pool_by_leases", "--"),
)


def _renewal_series(
    result: dict[str, Any], library: str, nested: str, key: str, counts: list[int]
) -> tuple[list[int], list[float]]:
    entry = result.get(library, {})
    xs, ys = [], []
    for count in counts:
        figures = entry.get(nested, {}).get(str(count)) or {}
        if key == "lost_pct":
            lost, held = figures.get("renew_lost"), figures.get("renew_locks")
            value = 100.0 * lost / held if lost is not None and held else None
        else:
            value = figures.get(key)
        if value is not None:
            xs.append(count)
            ys.append(max(value, 0.5) if key == "renew_threads" else value)
    return xs, ys


def _bars(ax: Any, names: list[str], values: list[Any], spreads: list[Any], colours: Any) -> None:
    shown = [value or 0.0 for value in values]
    errors = [_errors(v, s) for v, s in zip(values, spreads, strict=True)]
    ax.bar(
        range(len(names)),
        shown,
        yerr=[[e[0] for e in errors], [e[1] for e in errors]],
        color=colours,
        capsize=4,
    )
    ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)


def cycle(result: dict[str, Any], plt: Any) -> Any:
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    names = [library for library in LIBRARIES if result.get(library, {}).get("cycle_rtt")]
    colours = [COLOURS[name] for name in names]
    rows = [result[name] for name in names]
    _bars(
        axes[0],
        names,
        [r["cycle_rtt"] for r in rows],
        [r.get("cycle_rtt_spread") for r in rows],
        colours,
    )
    axes[0].axhline(2.2, color="grey", linestyle="--", linewidth=1, label="redlease target 2.2")
    axes[0].set_title("uncontended cycle in round trips (EVALSHA)")
    axes[0].legend(fontsize=8)
    _bars(
        axes[1],
        names,
        [r["cycle_us"] for r in rows],
        [r.get("cycle_us_spread") for r in rows],
        colours,
    )
    axes[1].set_title("uncontended cycle, µs")
    figure.suptitle("One process, no contention: acquire + release")
    return figure


def asynchronous(result: dict[str, Any], plt: Any) -> Any:
    names = [n for n in (*LIBRARIES, "aioredlock") if (result.get(n) or {}).get("async_cycle_us")]
    figure, ax = plt.subplots(figsize=(8, 4.2))
    width = 0.38
    for offset, (key, label, alpha) in enumerate(
        (("async_sync_cycle_us", "sync", 0.45), ("async_cycle_us", "asyncio", 1.0))
    ):
        xs = [index + (offset - 0.5) * width for index in range(len(names))]
        values = [result[n]["async"].get(key) or 0.0 for n in names]
        ax.bar(xs, values, width, label=label, alpha=alpha, color=[COLOURS[n] for n in names])
    ax.set_xticks(range(len(names)), names, fontsize=8)
    ax.set_ylabel("µs per cycle")
    ax.set_title("asyncio vs sync cycle (pale: sync, solid: asyncio)")
    ax.grid(True, axis="y", alpha=0.3)
    return figure


def flash_sale(result: dict[str, Any], plt: Any) -> Any:
    approaches = result["claims"]["flash_sale"]
    labels = [
        f"{name}\n(oversold {figures.get('oversold')})" if figures.get("oversold") else name
        for name, figures in approaches.items()
    ]
    return _claims_figure(
        plt,
        approaches,
        labels,
        (13, 4.6),
        ("buys_per_s", "buys / s (range over reps)", False),
        (("latency_p50_us", "latency_p99_us"), "buy latency, µs (log): p50 pale, p99 solid"),
        "Flash sale: one stock, many buyers",
    )


def _claims_figure(
    plt: Any,
    rows: dict[str, Any],
    labels: list[str],
    size: tuple[float, float],
    bars: tuple[str, str, bool],
    paired: tuple[tuple[str, str], str],
    title: str,
) -> Any:
    """Per row (approach or system): a bar with its range over reps (``bars``: key, title,
    log scale), beside its p50 and p99 as a pale and a solid bar (``paired``)."""
    names = list(rows)
    colours = [COLOURS["redlease"] if name == "redlease" else "#7f8c8d" for name in names]
    figure, axes = plt.subplots(1, 2, figsize=size)
    key, bars_title, log = bars
    values = [rows[name].get(key) for name in names]
    _bars(axes[0], labels, values, [_min_max(rows[name], key) for name in names], colours)
    if log:
        axes[0].set_yscale("log")
    axes[0].set_title(bars_title)
    keys, paired_title = paired
    _paired(axes[1], labels, rows, names, keys)
    axes[1].set_title(paired_title)
    figure.suptitle(title)
    return figure


def _min_max(figures: dict[str, Any], key: str) -> list[float] | None:
    low, high = figures.get(f"{key}_min"), figures.get(f"{key}_max")
    return [low, high] if low is not None and high is not None else None


def _paired(ax: Any, labels: list[str], rows: dict[str, Any], names: list[str], keys: Any) -> None:
    width = 0.38
    for offset, key in enumerate(keys):
        xs = [index + (offset - 0.5) * width for index in range(len(names))]
        values = [rows[name].get(key) or 0.0 for name in names]
        colours = [COLOURS["redlease"] if name == "redlease" else "#7f8c8d" for name in names]
        ax.bar(xs, values, width, color=colours, alpha=0.45 if offset == 0 else 1.0)
    ax.set_xticks(range(len(names)), labels, rotation=20, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.grid(True, axis="y", which="both", alpha=0.3)


def segments(result: dict[str, Any], plt: Any) -> Any:
    rows = result["claims"]["segments"]
    counts = sorted(rows, key=int)
    figure, ax = plt.subplots(figsize=(7, 4.2))
    values = [rows[c].get("buys_per_s") for c in counts]
    errors = [
        _errors(v, _min_max(rows[c], "buys_per_s")) for v, c in zip(values, counts, strict=True)
    ]
    ax.errorbar(
        [int(c) for c in counts],
        values,
        yerr=[[e[0] for e in errors], [e[1] for e in errors]],
        marker="o",
        capsize=3,
        color=COLOURS["redlease"],
    )
    ax.set_ylim(bottom=0)
    ax.set_xscale("log", base=2)
    ax.set_xticks([int(c) for c in counts], counts)
    ax.set_xlabel("stock segments (one redlease lock each)")
    ax.set_ylabel("buys / s")
    ax.set_title("Flash sale: throughput vs segments")
    ax.grid(True, which="both", alpha=0.3)
    return figure


def coordination(result: dict[str, Any], plt: Any) -> Any:
    systems = result["claims"]["coordination"]
    return _claims_figure(
        plt,
        systems,
        list(systems),
        (12, 4.4),
        ("cycle_us", "uncontended cycle, µs (log; range over reps)", True),
        (("handoff_p50_us", "handoff_p99_us"), "contended handoff, µs (log): p50 pale, p99 solid"),
        "Coordination systems: one lock",
    )


Plot = Callable[[dict[str, Any], Any], Any]
PLOTS: dict[str, tuple[str, Plot, Callable[[dict[str, Any]], bool]]] = {
    "handoff.png": ("handoff", handoff, lambda r: bool(counts_in(r, "contended"))),
    "contention.png": ("handoff", contention, lambda r: bool(counts_in(r, "contended"))),
    "renewal.png": ("renewal", renewal, lambda r: bool(counts_in(r, "renewal_by_leases"))),
    "cycle.png": ("cycle", cycle, lambda r: bool(r.get("redlease", {}).get("cycle_rtt"))),
    "async.png": ("async", asynchronous, lambda r: bool(r.get("redlease", {}).get("async"))),
    "flash_sale.png": ("flash", flash_sale, lambda r: bool(r["claims"].get("flash_sale"))),
    "segments.png": ("flash", segments, lambda r: bool(r["claims"].get("segments"))),
    "coordination.png": (
        "coordination",
        coordination,
        lambda r: bool(r["claims"].get("coordination")),
    ),
}


def available(result: dict[str, Any]) -> list[str]:
    """File names of the plots this result has data for."""
    return [name for name, (_, _, has) in PLOTS.items() if has(result)]


def write_plots(result: dict[str, Any], out_dir: Path, parts: Iterable[str] | None) -> list[Path]:
    """Write the plots of ``parts`` (None: all) that have data; returns the files written."""
    wanted = None if parts is None else set(parts)
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in available(result):
        part, draw, _ = PLOTS[name]
        if wanted is not None and part not in wanted:
            continue
        figure = draw(result, plt)
        figure.tight_layout()
        path = out_dir / name
        figure.savefig(path, dpi=DPI, metadata={"Software": None})
        plt.close(figure)
        written.append(path)
    return written
