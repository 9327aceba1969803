"""How the page writes a figure: numbers, medians with their range, and Markdown tables."""

# ruff: noqa: RUF001, RUF002 - the page shows en dashes
from __future__ import annotations

from typing import Any


def num(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != value:  # NaN
            return "n/a"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}"
    return str(value)


def med(value: Any, spread: Any = None) -> str:
    """``median [min–max]``; the range only when it is a range."""
    if value is None:
        return "n/a"
    if spread and len(spread) == 2 and None not in spread:
        low, high = num(spread[0]), num(spread[1])
        if low != high:
            return f"{num(value)} [{low}–{high}]"
    return num(value)


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def bold(text: str) -> str:
    return f"**{text}**" if text and text != "n/a" else text
