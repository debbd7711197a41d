"""Memory devices (dram, cxl): the transfer rule of devicemodels/memory.py against hand-computed cases.

Rule: s = max(arrival, next-free of each resource crossed); each resource r is held ceil(b_r * 1e9 / bw_r) ns
from s; end = s + the longest of those; done = end + load_ns / store_ns.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from click.testing import CliRunner

from devicemodels import DEVICES
from devicemodels.base import OP_READ, OP_TRIM, OP_WRITE, op_batch
from devicemodels.params import CxlParams, DramParams
from testbed.cli import cli
from kvbed.core.errors import KvbedError

from tests.support.devices import ops

R, W, T = OP_READ, OP_WRITE, OP_TRIM


def dram(*kv):
    return DEVICES.get("dram").from_params(["dram_bytes=64MiB", "page_bytes=4KiB", *kv])


def cxl(*kv):
    return DEVICES.get("cxl").from_params(["cxl_bytes=64MiB", "page_bytes=4KiB", *kv])


# ------------------------------------------------------------------------------------------------ dram


def test_dram_single_transfer_is_the_slowest_resource_plus_latency():
    # 16 pages = 64 KiB: GPU link 65536 / 64 GB/s = 1024 ns; DRAM 65536 / 307.2 GB/s = 213.3 -> 214 ns
    d = dram()
    c = d.submit(ops((R, 0, 16, 0, 5_000)))
    assert c.done_ns[0] == 5_000 + 1024 + 100
    assert d.stats()["resources"] == {"gpu_link": {"bytes_per_s": 64_000_000_000,
                                                   "busy_ns": {"read": 1024, "write": 0}},
                                      "devices": [{"bytes_read": 65536, "bytes_written": 0, "media_busy_ns": 214}]}
    # without the GPU link, the DRAM alone: 214 ns
    assert dram("link_bytes_per_s=0").submit(ops((R, 0, 16))).done_ns[0] == 214 + 100
    # NVLink-C2C at 450 GB/s: 65536 / 450 = 145.6 -> 146 ns on the link; now the DRAM (214 ns) sets the pace
    assert dram("link_bytes_per_s=450e9").submit(ops((W, 0, 16))).done_ns[0] == 214 + 100


def test_dram_overlapping_transfers_share_the_link_per_direction_and_the_media():
    d = dram()
    c = d.submit(ops((R, 0, 16, 0, 0), (W, 16, 16, 0, 0), (R, 32, 16, 0, 0), (T, 0, 4, 0, 0)))
    # read 1: s=0, link-read free at 1024, DRAM at 214 -> 1124
    # write: the link's write direction is idle, the DRAM is not: s=214, link-write free at 1238 -> 1238 + 100
    # read 2: s = max(link-read 1024, DRAM 428) = 1024 -> 2048 + 100
    assert c.done_ns.tolist() == [1124, 1338, 2148, 0]
    cnt = d.counters()
    assert cnt["queue_wait_ns"] == 214 + 1024
    assert (cnt["gpu_link_busy_ns"], cnt["media_busy_ns"], cnt["link_busy_ns"]) == (3 * 1024, 3 * 214, 0)
    assert (cnt["host_pages_read"], cnt["host_pages_written"], cnt["host_pages_trimmed"]) == (32, 16, 4)


def test_dram_media_slower_than_the_link_sets_the_pace_and_frees_the_link_early():
    # DRAM 32 GB/s, link 64 GB/s: 64 KiB holds the DRAM 2048 ns and the link 1024 ns
    d = dram("media_bytes_per_s=32e9", "load_ns=100", "store_ns=150")
    c = d.submit(ops((R, 0, 16, 0, 0), (R, 0, 16, 0, 1500), (W, 0, 16, 0, 1500)))
    assert c.done_ns[0] == 2048 + 100
    # the link is free at 1024, the DRAM only at 2048: the second read waits for the DRAM
    assert c.done_ns[1] == 2048 + 2048 + 100
    assert c.done_ns[2] == 4096 + 2048 + 150  # and the write for both reads (the DRAM is shared)


# ------------------------------------------------------------------------------------------------ cxl


def test_cxl_one_way_reads_or_writes_alone_are_the_single_link_queue():
    # 4 KiB over the 32 GB/s link: 128 ns; the CMM-D media (36 GB/s: 114 ns) and GPU link (64 ns) keep up
    d = cxl("load_ns=250", "store_ns=300")
    c = d.submit(ops((R, 0, 1, 0, 0), (R, 10, 8, 0, 0), (R, 0, 1, 0, 10_000)))
    assert c.done_ns.tolist() == [128 + 250, 128 + 8 * 128 + 250, 10_000 + 128 + 250]
    c = d.submit(ops((W, 0, 1, 0, 20_000), (W, 10, 8, 0, 20_000)))
    assert c.done_ns.tolist() == [20_000 + 128 + 300, 20_000 + 128 + 1024 + 300]


def test_cxl_reads_and_writes_overlap_on_the_duplex_link_and_meet_in_the_media():
    d = cxl("load_ns=250", "store_ns=300")
    c = d.submit(ops((R, 0, 1, 0, 0), (W, 10, 8, 0, 0), (T, 0, 4, 0, 10_000)))
    # the write does not wait for the read's link transfer (other direction) but for its media time, 114 ns:
    # s = 114; link 8 x 128 = 1024 ns, media 32768 / 36 = 910.2 -> 911 ns, GPU link 512 ns
    assert c.done_ns.tolist() == [128 + 250, 114 + 1024 + 300, 10_000]
    s = d.stats()
    assert s["waf"] == 1.0 and s["latency"]["read"]["lat_ns"]["min"] == 378 and s["queue_wait_ns"] == 114
    assert s["link_busy_ns"] == 128 + 1024


def test_cxl_with_media_equal_to_the_link_is_the_old_single_queue_model_for_any_mix():
    """One way, media = link bandwidth, no GPU link: done = max(arrival, free) + ceil(bytes / bw) + latency,
    the model before interleaving, whatever the mix of reads and writes."""
    rng = np.random.default_rng(3)
    n = 2000
    op = rng.choice([R, W, T], n, p=[0.5, 0.4, 0.1]).astype(np.int8)
    npg = rng.integers(1, 33, n).astype(np.int32)
    lba = rng.integers(0, 16384 - 32, n)
    arr = np.cumsum(rng.integers(0, 2000, n))
    d = cxl("media_bytes_per_s=32e9", "gpu_link_bytes_per_s=0", "load_ns=250", "store_ns=300")
    got = d.submit(op_batch(op, lba, npg, arrival_ns=arr)).done_ns
    free = 0
    for i in range(n):
        if op[i] == T:
            assert got[i] == arr[i]
            continue
        s = max(arr[i], free)
        free = s + -(-int(npg[i]) * 4096 * 10**9 // 32_000_000_000)
        assert got[i] == free + (300 if op[i] == W else 250), i


def test_cxl_interleaving_splits_a_transfer_over_the_devices():
    # 2 ways at 256 B: 64 KiB puts 32 KiB on each device: links 1024 ns, media 911 ns, GPU link 65536/64 = 1024
    d = cxl("interleave_ways=2", "interleave_granule_bytes=256", "load_ns=250")
    assert d.submit(ops((R, 0, 16))).done_ns[0] == 1024 + 250
    devs = d.stats()["resources"]["devices"]
    assert [(e["bytes_read"], e["media_busy_ns"], e["link_busy_ns"]["read"]) for e in devs] == [(32768, 911, 1024)] * 2
    # one device would take 2048 ns on its link for the same transfer
    assert cxl("load_ns=250").submit(ops((R, 0, 16))).done_ns[0] == 2048 + 250


def test_cxl_interleaving_lets_transfers_on_different_devices_overlap():
    # 4 ways at 16 KiB granules, 4 KiB pages: page 0 is on device 0, page 4 on device 1, page 1 on device 0
    same = cxl("interleave_ways=4", "interleave_granule_bytes=16KiB", "gpu_link_bytes_per_s=0", "load_ns=250")
    c = same.submit(ops((R, 0, 1, 0, 0), (R, 1, 1, 0, 0)))
    assert c.done_ns.tolist() == [128 + 250, 256 + 250]  # one device's link, one after the other
    apart = cxl("interleave_ways=4", "interleave_granule_bytes=16KiB", "gpu_link_bytes_per_s=0", "load_ns=250")
    c = apart.submit(ops((R, 0, 1, 0, 0), (R, 4, 1, 0, 0)))
    assert c.done_ns.tolist() == [128 + 250, 128 + 250]  # two devices: in parallel
    # with the shared GPU link (64 ns per page) the second waits for the first's 64 ns there, then 128 ns
    shared = cxl("interleave_ways=4", "interleave_granule_bytes=16KiB", "load_ns=250")
    c = shared.submit(ops((R, 0, 1, 0, 0), (R, 4, 1, 0, 0)))
    assert c.done_ns.tolist() == [128 + 250, 64 + 128 + 250]
    assert shared.counters()["queue_wait_ns"] == 64


def test_cxl_interleave_map_with_three_ways_and_an_unaligned_start():
    # 4 KiB = 16 granules of 256 B. From page 0: devices 0,1,2,0,1,2,... -> 6, 5, 5 granules.
    # From page 1 (granule 16, 16 % 3 = 1): devices 1,2,0,... -> device 1 gets 6, the others 5.
    d = cxl("interleave_ways=3")
    d.submit(ops((R, 0, 1), (W, 1, 1)))
    devs = d.stats()["resources"]["devices"]
    assert [e["bytes_read"] for e in devs] == [1536, 1280, 1280]
    assert [e["bytes_written"] for e in devs] == [1280, 1536, 1280]


@settings(max_examples=60, deadline=None)
@given(ways=st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16]), granule_exp=st.integers(0, 6),
       page_exp=st.integers(6, 14), lba=st.integers(0, 200), npages=st.integers(1, 9))
def test_interleave_bytes_per_device_match_a_byte_by_byte_count(ways, granule_exp, page_exp, lba, npages):
    granule, page = 256 << granule_exp, 1 << page_exp
    d = DEVICES.get("cxl").from_params([f"cxl_bytes={page * 256}", f"page_bytes={page}", f"interleave_ways={ways}",
                                        f"interleave_granule_bytes={granule}"])
    d.submit(ops((R, lba, npages)))
    got = [e["bytes_read"] for e in d.stats()["resources"]["devices"]]
    addr = np.arange(lba * page, (lba + npages) * page, dtype=np.int64)
    want = np.bincount((addr // granule) % ways, minlength=ways).tolist()
    assert got == want


def test_bad_memory_parameters_are_one_line_errors():
    for cls, kv, msg in [
        (DramParams, {"media_bytes_per_s": -1}, "media_bytes_per_s must be positive, got -1"),
        (DramParams, {"link_bytes_per_s": -5}, "link_bytes_per_s must be >= 0 (0 = not modelled), got -5"),
        (DramParams, {"dram_bytes": 5000}, "dram_bytes (5000) must be a multiple of page_bytes (4096)"),
        (CxlParams, {"bandwidth_bytes_per_s": 0}, "bandwidth_bytes_per_s must be positive, got 0"),
        (CxlParams, {"gpu_link_bytes_per_s": -1}, "gpu_link_bytes_per_s must be >= 0"),
        (CxlParams, {"interleave_ways": 5}, "interleave_ways must be one of 1, 2, 3, 4, 6, 8, 12, 16"),
        (CxlParams, {"interleave_granule_bytes": 100}, "interleave_granule_bytes must be a power of two from 256"),
    ]:
        with pytest.raises(KvbedError, match=msg.replace("(", "\\(").replace(")", "\\)")):
            cls(**kv).validate()


@pytest.mark.parametrize("args, msg", [
    (["--device", "dram", "--param", "media_bytes_per_s=-1"], "media_bytes_per_s must be positive, got -1"),
    (["--device", "cxl", "--param", "bandwidth_bytes_per_s=-32e9"], "bandwidth_bytes_per_s must be positive"),
    (["--device", "cxl", "--param", "interleave_ways=7"], "interleave_ways must be one of"),
])
def test_bad_memory_parameters_exit_2_on_the_cli(args, msg):
    r = CliRunner().invoke(cli, ["device", "run", *args])
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("kvbed: error: ") and msg in lines[0], r.output


def test_dram_runs_from_the_cli_and_shows_its_parameters():
    r = CliRunner().invoke(cli, ["device", "run", "--device", "dram", "--pages", "4096", "--writes-x", "1",
                                 "--read-frac", "0.5", "--iops", "1e6"])
    assert r.exit_code == 0, r.output
    # one 4 KiB page at a time, never overlapping: 4096 / 64 GB/s = 64 ns + 100 ns
    assert "read: ios=4096" in r.output and "min=164, max=164" in r.output and "WAF=1.0000" in r.output
    r = CliRunner().invoke(cli, ["device", "params", "dram"])
    assert r.exit_code == 0 and "link_bytes_per_s" in r.output and "media_bytes_per_s" in r.output
    r = CliRunner().invoke(cli, ["device", "params", "cxl"])
    assert "interleave_ways" in r.output and "interleave_granule_bytes" in r.output


def test_an_op_too_large_for_the_arithmetic_is_refused():
    d = DEVICES.get("dram").from_params(["dram_bytes=64GiB", "page_bytes=1GiB"])
    with pytest.raises(KvbedError, match="larger than the 8GiB a memory model moves in one op"):
        d.submit(ops((R, 0, 9)))
