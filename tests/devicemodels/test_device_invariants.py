"""Property tests (hypothesis): the FTL keeps its books straight under any op sequence, and ZNS
follows a reference state machine.

Checked after every batch: L2P and P2L are inverse (each LBA maps to at most one valid page and
back), valid counts per line match P2L, valid pages equal mapped LBAs (conserved), free space
accounting is never negative, media writes >= host writes, completions are not before arrivals,
and the mapped LBA set equals a plain Python model of writes minus trims. Under greedy GC, the
valid-count buckets hold exactly the closed lines, each in the bucket of its valid count.

A GC policy code that the kernel does not dispatch is an error at the first GC, not another policy.
"""

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devicemodels import ftl_state as S
from devicemodels.base import (GC_POLICIES, OP_READ, OP_RUH_UPDATE, OP_TRIM, OP_WRITE, OP_ZONE_APPEND, OP_ZONE_FINISH,
                               OP_ZONE_RESET, op_batch)
from devicemodels.gc_policies import NO_POLICY, select_victim
from kvbed.core.errors import KvbedError

from tests.support.devices import make, writes

L = 1024  # logical pages of the test devices below
SMALL = ["logical_bytes=4MiB", "pages_per_block=8", "channels=2", "dies_per_channel=2", "op_ratio=0.5"]

op_rows = st.lists(
    st.tuples(st.sampled_from([OP_WRITE, OP_WRITE, OP_WRITE, OP_TRIM, OP_READ, OP_RUH_UPDATE]),
              st.integers(0, L - 1), st.integers(1, 24), st.integers(0, 3), st.integers(0, 300_000)),
    min_size=1, max_size=400)

configs = st.fixed_dictionaries({
    "device": st.sampled_from(["conv", "fdp"]),
    "gc": st.sampled_from(["greedy", "fifo", "random", "d-choices", "cost-benefit"]),
    "timing": st.booleans(),
    "ruh_type": st.sampled_from(["initially", "persistently"]),
    "wbuf": st.sampled_from([0, 4]),
    "shared": st.booleans(),
})


def _device(cfg):
    extra = [f"gc_policy={cfg['gc']}", f"timing={cfg['timing']}", f"write_buffer_bytes={cfg['wbuf'] * 4096}"]
    if cfg["device"] == "fdp":
        extra += ["ru_bytes=64KiB", "nruh=4", f"ruh_type={cfg['ruh_type']}"]
    elif cfg["shared"]:
        extra += ["gc_separate_frontier=false", "gc_fg_free_lines=2", "blocks_per_line=2"]
    else:
        extra += ["blocks_per_line=2"]
    return make(cfg["device"], *extra, base=SMALL)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs, batches=st.lists(op_rows, min_size=1, max_size=4))
def test_ftl_invariants(cfg, batches):
    d = _device(cfg)
    assert d.logical_pages == L
    mapped = np.zeros(L, bool)
    host = 0
    t = 0
    for rows in batches:
        op, lba, npg, pid, gap = (np.array(c) for c in zip(*rows))
        if cfg["device"] == "conv":
            op = np.where(op == OP_RUH_UPDATE, OP_READ, op)
        npg = np.minimum(npg, L - lba)
        arrival = t + np.cumsum(gap)
        t = int(arrival[-1])
        c = d.submit(op_batch(op, lba, npg, pid, arrival))
        assert (c.done_ns >= arrival).all()
        for o, a, n in zip(op, lba, npg):
            if o == OP_WRITE:
                mapped[a:a + n] = True
                host += int(n)
            elif o == OP_TRIM:
                mapped[a:a + n] = False
        d.check_invariants()
        assert np.array_equal(d.st.l2p >= 0, mapped)
        cnt = d.counters()
        assert cnt["host_pages_written"] == host
        assert cnt["media_pages_written"] == host + cnt["gc_pages_moved"] >= host
        assert min(d.stats()["gc"]["free_lines"]) >= 0


def check_buckets(d):
    """Greedy's buckets (``bhead[rg*(ppl+1) + v]`` -> ``bnext``/``bprev`` lists) hold exactly the closed
    lines of each reclaim group, each in the bucket of its valid count, with consistent links, and the
    group's ``RG_BMIN`` is at most its smallest non-empty bucket. Valid counts match P2L."""
    s, g = d.st, d.geo
    assert np.array_equal((s.p2l.reshape(g.N, g.ppl) >= 0).sum(axis=1), s.vc), "vc != valid P2L entries per line"
    for rg in range(g.nrg):
        lines = np.arange(rg * g.lpr, (rg + 1) * g.lpr)
        closed = set(lines[s.lstate[lines] == S.LINE_CLOSED].tolist())
        found: set[int] = set()
        nonempty = []
        for v in range(g.ppl + 1):
            prev, line = -1, int(s.bhead[rg * (g.ppl + 1) + v])
            while line >= 0:
                assert line not in found, f"RG {rg}: line {line} is listed twice (or the list loops)"
                assert line in closed, f"RG {rg}: bucket {v} holds line {line}, which is not a closed line of the group"
                assert s.vc[line] == v, f"RG {rg}: line {line} with {s.vc[line]} valid pages is in bucket {v}"
                assert s.bprev[line] == prev, f"RG {rg}: bprev of line {line} is {s.bprev[line]}, not {prev}"
                found.add(line)
                prev, line = line, int(s.bnext[line])
            if prev >= 0:
                nonempty.append(v)
        assert found == closed, f"RG {rg}: closed lines missing from the buckets: {sorted(closed - found)}"
        if nonempty:
            assert s.rgm[rg, S.RG_BMIN] <= nonempty[0], f"RG {rg}: RG_BMIN above the smallest bucket {nonempty[0]}"


greedy_configs = st.fixed_dictionaries({
    "device": st.sampled_from(["conv", "fdp"]),
    "nrg": st.sampled_from([1, 2]),
    "ruh_type": st.sampled_from(["initially", "persistently"]),
    "shared": st.booleans(),
    "timing": st.booleans(),
    "seed": st.integers(0, 2**16),
})

greedy_rows = st.lists(
    st.tuples(st.sampled_from([OP_WRITE, OP_WRITE, OP_WRITE, OP_TRIM, OP_READ, OP_RUH_UPDATE]),
              st.integers(0, L - 1), st.integers(1, 24), st.integers(0, 1), st.integers(0, 300_000)),
    min_size=1, max_size=300)


def _greedy_device(cfg):
    """Greedy with little spare room, so GC runs often (a reclaim group keeps barely enough lines)."""
    extra = ["gc_policy=greedy", f"timing={cfg['timing']}", f"seed={cfg['seed']}"]
    if cfg["device"] == "fdp":
        extra += ["op_ratio=0.25", "ru_bytes=64KiB", "nruh=2", f"nrg={cfg['nrg']}", f"ruh_type={cfg['ruh_type']}"]
    elif cfg["shared"]:
        extra += ["op_ratio=0.1", "blocks_per_line=2", "gc_separate_frontier=false", "gc_fg_free_lines=2"]
    else:
        extra += ["op_ratio=0.1", "blocks_per_line=2"]
    return make(cfg["device"], *extra, base=SMALL)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=greedy_configs, batches=st.lists(greedy_rows, min_size=1, max_size=4))
def test_greedy_buckets_hold_exactly_the_closed_lines(cfg, batches):
    d = _greedy_device(cfg)
    g = d.geo
    share = L // g.nrg  # each reclaim group gets its own part of the LBAs, so none holds more than its share
    rng = np.random.default_rng(cfg["seed"])
    fill = np.concatenate((np.arange(L), rng.integers(0, L, L)))  # fill, then one capacity of overwrites
    t = 0
    for part in np.split(fill, 16):
        d.submit(writes(part, pid=part // share * g.nruh, t=t + np.arange(part.size) * 50_000))
        t += part.size * 50_000
        check_buckets(d)
    assert d.counters()["gc_runs"] > 0
    for rows in batches:
        op, lba, npg, ruh, gap = (np.array(c) for c in zip(*rows))
        if cfg["device"] == "conv":
            op = np.where(op == OP_RUH_UPDATE, OP_READ, op)
        rg = lba // share
        npg = np.minimum(npg, (rg + 1) * share - lba)  # stay in the group's LBAs
        arrival = t + np.cumsum(gap)
        t = int(arrival[-1])
        d.submit(op_batch(op, lba, npg, rg * g.nruh + ruh, arrival))
        check_buckets(d)
        d.check_invariants()


@pytest.mark.parametrize("name", GC_POLICIES.names())
def test_every_registered_gc_policy_is_dispatched(name):
    d = make("conv", f"gc_policy={name}", "blocks_per_line=2", base=SMALL)
    assert select_victim(d.st, d.geo, 0) == -1  # no closed line yet (an undispatched code gives NO_POLICY)
    d.submit(writes(np.arange(L)))
    v = select_victim(d.st, d.geo, 0)
    assert v >= 0 and d.st.lstate[v] == S.LINE_CLOSED
    unknown = max(GC_POLICIES.get(n).code for n in GC_POLICIES) + 1
    assert select_victim(d.st, d.geo._replace(policy=unknown), 0) == NO_POLICY


CONV_LOW_OP = ["op_ratio=0.1", "blocks_per_line=2"]


@pytest.mark.parametrize("device, params, first_gc", [
    ("conv", [*CONV_LOW_OP, "timing=false"], "gc_fg_runs"),
    ("conv", [*CONV_LOW_OP, "timing=true"], "gc_bg_runs"),  # background GC in idle gaps
    ("conv", [*CONV_LOW_OP, "timing=true", "gc_bg_trigger=threshold"], "gc_bg_runs"),  # ... after a line opens
    ("conv", [*CONV_LOW_OP, "timing=false", "gc_separate_frontier=false", "gc_fg_free_lines=2"], "gc_fg_runs"),
    ("fdp", ["op_ratio=0.25", "ru_bytes=64KiB", "nruh=4", "timing=false"], "gc_fg_runs"),
])
def test_an_unknown_gc_policy_code_is_an_error_at_the_first_gc(device, params, first_gc):
    """A device whose policy code is not dispatched fails with one located error, having collected nothing,
    where the same device with cost-benefit (what an unknown code used to run) first collects in the
    foreground. Background GC cannot run without a policy: it stops, and the error comes when foreground
    GC must run, i.e. where a device without background GC first collects."""
    bad = make(device, "gc_policy=cost-benefit", *params, base=SMALL)
    no_bg = ["gc_bg_free_lines=1", "gc_fg_free_lines=1"] if first_gc == "gc_bg_runs" else []
    ref = make(device, "gc_policy=cost-benefit", *params, *no_bg, base=SMALL)
    bad.geo = bad.geo._replace(policy=99)
    lbas = np.concatenate((np.arange(L), np.random.default_rng(1).integers(0, L, 2 * L)))
    batch = writes(lbas, t=np.arange(lbas.size) * 10_000_000)  # 10 ms apart: idle gaps for background GC
    with pytest.raises(KvbedError) as e:
        bad.submit(batch)
    msg = str(e.value)
    m = re.fullmatch(rf"{device} op (\d+): GC victim policy code 99 is not one the FTL kernel dispatches "
                     r"\(registered: .*cost-benefit=1.*\)", msg)
    assert m, msg
    i = int(m.group(1))
    assert bad.counters()["gc_runs"] == 0 and not bad.st.erase.any()  # no victim was collected
    ref.submit({k: c[:i] for k, c in batch.items()})
    assert ref.counters()["gc_runs"] == 0
    ref.submit({k: c[i:i + 1] for k, c in batch.items()})
    assert ref.counters()["gc_fg_runs"] > 0


zone_rows = st.lists(
    st.tuples(st.sampled_from([OP_WRITE, OP_WRITE, OP_ZONE_APPEND, OP_ZONE_RESET, OP_ZONE_FINISH, OP_READ]),
              st.integers(0, 7), st.sampled_from([0, 0, 0, 1, 5]), st.integers(1, 40)),
    min_size=1, max_size=80)


@settings(max_examples=80, deadline=None)
@given(rows=zone_rows, implicit_close=st.booleans())
def test_zns_matches_a_reference_state_machine(rows, implicit_close):
    """Each op alone; the device accepts exactly what the reference accepts and lands in the same state."""
    d = make("zns", "zone_bytes=64KiB", "zone_cap_bytes=48KiB", "max_open_zones=2", "max_active_zones=3",
             f"implicit_close={implicit_close}", base=["logical_bytes=512KiB", "pages_per_block=4"])
    zp, cap = 16, 12
    wp = [0] * 8
    state = ["empty"] * 8  # empty | open | closed | full
    seq = [0] * 8
    tick = 0
    for o, z, off_kind, n in rows:
        tick += 1
        off = {0: wp[z], 1: 0, 5: wp[z] + 1}[off_kind] if o == OP_WRITE else (0 if off_kind == 0 else 1)
        lba = z * zp + min(off, zp - 1)
        ok = True
        if o in (OP_WRITE, OP_ZONE_APPEND):
            if o == OP_ZONE_APPEND and lba != z * zp:
                ok = False
            start = wp[z] if o == OP_ZONE_APPEND else lba - z * zp
            if ok and (state[z] == "full" or start != wp[z] or wp[z] + n > cap):
                ok = False
            if ok and state[z] != "open":
                n_open = state.count("open")
                n_active = n_open + state.count("closed")
                if state[z] == "empty" and n_active >= 3:
                    ok = False
                elif n_open >= 2:
                    if not implicit_close:
                        ok = False
                    else:
                        victim = min((y for y in range(8) if state[y] == "open"), key=lambda y: seq[y])
                        state[victim] = "closed"
            if ok:
                if state[z] != "open":
                    state[z] = "open"
                    seq[z] = tick
                wp[z] += n
                if wp[z] == cap:
                    state[z] = "full"
        elif o in (OP_ZONE_RESET, OP_ZONE_FINISH):
            if lba != z * zp:
                ok = False
            elif o == OP_ZONE_RESET:
                state[z], wp[z] = "empty", 0
            else:
                state[z] = "full"
        else:
            n = min(n, 8 * zp - lba)
        batch = op_batch(np.array([o]), np.array([lba]), np.array([n]))
        if ok:
            d.submit(batch)
        else:
            try:
                d.submit(batch)
                raise AssertionError(f"device accepted {o} at {lba} (+{n}) that the reference refuses")
            except KvbedError:
                pass
        assert list(d.zones()["wp"]) == wp
        codes = {"empty": 0, "open": 1, "closed": 3, "full": 4}
        assert list(d.zones()["state"]) == [codes[s] for s in state]
        d.check_invariants()
