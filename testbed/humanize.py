"""Byte counts, durations and ratios as people read them, for the CLI's tables and ``kvbed report``.

Two precisions: ``fmt_bytes(n)`` / ``fmt_ns(ns)`` give a fixed number of decimals (1.5 KiB, 43.80 ms),
and ``sig3=True`` three significant digits (43.8 ms, 5.00 s, 531 ms) for report columns.
"""

from __future__ import annotations

BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
TIME_UNITS = (("h", 3600e9), ("min", 60e9), ("s", 1e9), ("ms", 1e6), ("us", 1e3))


def fmt_bytes(n: float | int | None, *, sig3: bool = False) -> str:
    if n is None:
        return "-"
    v = float(n)
    for unit in BYTE_UNITS:
        if abs(v) < 1024 or unit == BYTE_UNITS[-1]:
            break
        v /= 1024
    if unit == "B" or (sig3 and abs(v) >= 100):
        return f"{v:.0f} {unit}"
    return f"{v:.1f} {unit}"


def fmt_ns(ns: float | int | None, *, sig3: bool = False) -> str:
    if ns is None:
        return "-"
    ns = float(ns)
    for unit, div in TIME_UNITS:
        if abs(ns) >= div:
            v = ns / div
            if not sig3:
                return f"{v:.2f} {unit}"
            return f"{v:.0f} {unit}" if v >= 100 else f"{v:.1f} {unit}" if v >= 10 else f"{v:.2f} {unit}"
    return f"{ns:.0f} ns"


def fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"
