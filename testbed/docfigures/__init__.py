"""Figures quoted in the README and docs, generated from saved runs: the figure sets (one module each)
register in :data:`~testbed.docfigures.base.FIGURE_SETS`; :mod:`testbed.docfigures.base` runs, saves and renders
them (``scripts/doc_figures.py``)."""

from __future__ import annotations

from testbed.docfigures import (  # noqa: F401  (registration)
    crossover,
    demo,
    faults,
    femu_kv,
    femu_lat,
    mooncake_content,
    mooncake_tiers,
    sharing,
    stale_index,
)
from testbed.docfigures.base import FIGURE_SETS, FigureSet

__all__ = ["FIGURE_SETS", "FigureSet"]
