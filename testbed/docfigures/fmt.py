"""How figures are written in the docs' prose (three significant digits, the units kvbed's tables use)."""

from __future__ import annotations

from testbed import humanize


def ns(x: float | int | None) -> str:
    return humanize.fmt_ns(x, sig3=True)


def nbytes(x: float | int | None) -> str:
    return humanize.fmt_bytes(x, sig3=True)


def pct(x: float, digits: int = 1) -> str:
    return f"{100 * x:.{digits}f}%"


def gbps(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e9:.2f} GB/s"


def wrap(text: str, width: int = 112) -> str:
    """Prose as the README wraps it: no line over ``width``, and a number never split from its unit."""
    import re
    import textwrap

    glued = re.sub(r"(\d) (?=[A-Za-z%]+\b)", "\\1\x00", text)
    return textwrap.fill(glued, width=width, break_on_hyphens=False, break_long_words=False).replace("\x00", " ")


def chain(items: list[tuple[str, float]]) -> str:
    """``a < b = c``: labels joined by the comparison their values actually have."""
    out = items[0][0]
    for (_, prev), (label, v) in zip(items, items[1:]):
        out += f" {'<' if prev < v else '>' if prev > v else '='} {label}"
    return out
