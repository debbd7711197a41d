"""GC victim policies: registry entries plus their numba victim selectors.

Why an integer code and one dispatch function instead of passing the selector
as a first-class function: numba does not cache kernels specialised on a
function argument (they recompile in every process), and the FTL kernel is big.
So each policy is one njit selector here, one registry entry with its code, and
one branch in :func:`select_victim`.

Every selector returns a closed line of reclaim group ``rg`` (or -1 if there is
none) and does not change state except FIFO, which pops its ring; the caller
unlinks the victim from the other structures. A policy code that
:func:`select_victim` does not dispatch is answered with ``NO_POLICY`` (no
selector runs), which the FTL kernel reports as an error instead of running
some other policy.
"""

from __future__ import annotations

from dataclasses import dataclass


from devicemodels import rng as _rng
from devicemodels.base import GC_POLICIES
from devicemodels.jit import kernel
from devicemodels.ftl_state import (LINE_CLOSED, M_CLOCK, RG_BMIN, RG_CLOSED, RG_FIFO_HEAD, RG_FIFO_TAIL)

GREEDY, COST_BENEFIT, FIFO, RANDOM, DCHOICES = range(5)
NO_POLICY = -2  # select_victim's answer to an unknown policy code (-1 is "no closed line")


@dataclass(frozen=True)
class GcPolicy:
    code: int
    summary: str
    needs_buckets: bool = False  # keep closed lines in valid-count buckets (O(1) min)
    needs_fifo: bool = False  # keep closed lines in close order


GC_POLICIES.register("greedy")(GcPolicy(
    GREEDY, "fewest valid pages; O(1) via buckets indexed by valid count", needs_buckets=True))
GC_POLICIES.register("cost-benefit")(GcPolicy(
    COST_BENEFIT, "max age*(1-u)/(2u) (Kawaguchi et al.), age in media pages written; O(lines) scan"))
GC_POLICIES.register("fifo")(GcPolicy(
    FIFO, "oldest closed line (LRU cleaning; the analytic model)", needs_fifo=True))
GC_POLICIES.register("random")(GcPolicy(RANDOM, "uniformly random closed line"))
GC_POLICIES.register("d-choices")(GcPolicy(
    DCHOICES, "fewest valid of gc_d_choices random closed lines"))


@kernel
def _greedy(st, g, rg):
    base = rg * (g.ppl + 1)
    c = st.rgm[rg, RG_BMIN]
    while c <= g.ppl and st.bhead[base + c] < 0:
        c += 1
    if c > g.ppl:
        st.rgm[rg, RG_BMIN] = g.ppl + 1
        return -1
    st.rgm[rg, RG_BMIN] = c
    return st.bhead[base + c]


@kernel
def _fifo(st, g, rg):
    h = st.rgm[rg, RG_FIFO_HEAD]
    while h < st.rgm[rg, RG_FIFO_TAIL]:
        line = st.fifo[rg * g.lpr + h % g.lpr]
        h += 1
        if st.lstate[line] == LINE_CLOSED:
            st.rgm[rg, RG_FIFO_HEAD] = h
            return line
    st.rgm[rg, RG_FIFO_HEAD] = h
    return -1


@kernel
def _random(st, g, rg):
    n = st.rgm[rg, RG_CLOSED]
    if n == 0:
        return -1
    return st.closed[rg * g.lpr + _rng.below(st.rng, n)]


@kernel
def _dchoices(st, g, rg):
    n = st.rgm[rg, RG_CLOSED]
    if n == 0:
        return -1
    best = -1
    bestv = g.ppl + 1
    for _ in range(g.d):
        line = st.closed[rg * g.lpr + _rng.below(st.rng, n)]
        if st.vc[line] < bestv:
            bestv = st.vc[line]
            best = line
    return best


@kernel
def _cost_benefit(st, g, rg):
    n = st.rgm[rg, RG_CLOSED]
    now = st.misc[M_CLOCK]
    best = -1
    bests = -1.0
    for i in range(n):
        line = st.closed[rg * g.lpr + i]
        v = st.vc[line]
        if v == 0:
            return line  # free space at no cost
        u = v / g.ppl
        age = now - st.close_seq[line] + 1
        s = age * (1.0 - u) / (2.0 * u)
        if s > bests:
            bests = s
            best = line
    return best


@kernel
def select_victim(st, g, rg):
    """The victim of policy ``g.policy`` in group ``rg``: a closed line, -1 if there is none, or
    ``NO_POLICY`` if the code is not a registered policy's (nothing runs, nothing changes)."""
    p = g.policy
    if p == GREEDY:
        return _greedy(st, g, rg)
    if p == COST_BENEFIT:
        return _cost_benefit(st, g, rg)
    if p == FIFO:
        return _fifo(st, g, rg)
    if p == RANDOM:
        return _random(st, g, rg)
    if p == DCHOICES:
        return _dchoices(st, g, rg)
    return NO_POLICY


def policy_names() -> list[str]:
    return GC_POLICIES.names()


