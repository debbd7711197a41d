"""Where the trace checks record a violation (kvreplay.validate's row checks and kvreplay.keycheck's content-key
checks fill the same arrays): the first rows kept for the one-line message, a count per code and in total."""

from __future__ import annotations

from devicemodels.jit import njit


@njit(inline="always")
def flag(vrow, vcode, vcount, row, code, total):
    """Record violation ``code`` at ``row``: kept while ``vrow`` has room, counted under ``code`` and under
    ``total`` (the index of the all-codes count in ``vcount``); 1, so a caller can sum what it flagged."""
    n = vcount[total]
    if n < vrow.shape[0]:
        vrow[n] = row
        vcode[n] = code
    vcount[code] += 1
    vcount[total] += 1
    return 1
