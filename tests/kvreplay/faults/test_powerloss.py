"""The pieces of a power loss through a real guest that need no QEMU: object payloads and their scan (the
agent's executor on a fake namespace that keeps its data), the kill point (the same units on the media as
the fault model's lose_inflight), the payload columns, the split of a batch at the kill point, the comparison
with the fault model's media map, and guest histograms merged across a restart."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devicemodels.base import OP_READ, OP_TRIM, OP_WRITE
from kvreplay.agent import payload as P
from kvreplay.agent.executor import NvmeExecutor
from kvreplay.agent.hist import Histogram, percentiles
from kvreplay.agent.nvme import DmaBuffer, NsInfo
from kvreplay.faults.model import lose_inflight
from kvreplay.faults.params import parse_fault
from kvreplay.faults.state import FaultLog, Media
from kvreplay.layout.common import SRC_GC, SRC_USER
from testbed.vm.powerloss import GuestPowerLoss, payload_columns, units_on_media
from testbed.vm.target import FIO_PERCENTILES, merge_histograms

PB = 4096


# --- payloads ----------------------------------------------------------------------------------------------
def test_crc32c_is_castagnoli_from_the_kernel_or_python():
    assert P.crc32c_python(b"123456789") == 0xE3069283  # the standard check value of CRC-32C
    assert P.crc32c_python(b"") == 0
    assert P.crc32c_python(bytes(1 << 20)) == P._ZERO_MIB_CRC  # the probe that picks the kernel's fastest
    data = np.random.default_rng(1).integers(0, 256, 100_000, dtype=np.uint8).tobytes()
    c = P.Crc32c()
    py = P.Crc32c(use_kernel=False)
    assert py.source == "python" and py(data) == P.crc32c_python(data)
    assert c.source == "python" or c.source.startswith("kernel (crc32c")
    assert c(data) == py(data) and c(b"123456789") == 0xE3069283  # kernel (AF_ALG) where the host has it
    c.close()


def test_a_write_reads_back_intact_and_every_damage_is_named():
    crc = P.Crc32c(use_kernel=False)
    w = P.build_write(obj=7, wid=123, version=0, npages=3, page_bytes=PB)
    assert len(w) == 3 * PB
    assert P.classify(w, 7, 123, 3, PB, crc) == (P.INTACT, 3)
    torn = bytearray(w)
    torn[2 * PB:] = bytes(PB)  # the last unit never reached the media
    assert P.classify(torn, 7, 123, 3, PB, crc) == (P.TORN, 2)
    flipped = bytearray(w)
    flipped[PB + 100] ^= 0x10  # one bit of the (zero) filler changed in place: every stamp right, the CRC wrong
    assert P.classify(flipped, 7, 123, 3, PB, crc) == (P.CORRUPT, 3)
    assert P.classify(bytes(3 * PB), 7, 123, 3, PB, crc) == (P.MISSING, 0)
    # the same object written again (another write id) is not this write: a stale copy never passes
    again = P.build_write(obj=7, wid=200, version=0, npages=3, page_bytes=PB)
    assert P.classify(again, 7, 123, 3, PB, crc) == (P.MISSING, 0)
    mixed = bytearray(w)
    mixed[PB:2 * PB] = again[PB:2 * PB]
    assert P.classify(mixed, 7, 123, 3, PB, crc) == (P.TORN, 2)
    # the header: length and CRC32C of everything after it
    length, want = P.OBJ_HEADER.unpack_from(w, P.PAGE_STAMP.size)
    assert length == 3 * PB - P.HEADER_BYTES and want == P.crc32c_python(w[P.HEADER_BYTES:])


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.sampled_from([48, 512, 4096, 4104, 16384, 1 << 20]), st.integers(0, 2**40),
       st.integers(0, 2**40), st.integers(0, 7))
def test_the_crc_of_a_write_follows_from_its_stamps(npages, page_bytes, obj, wid, version):
    """write_crc (zero runs as linear maps) is the CRC32C of the bytes the write puts on the device."""
    w = P.build_write(obj, wid, version, npages, page_bytes)
    assert P.write_crc(obj, wid, version, npages, page_bytes) == P.crc32c_python(w[P.HEADER_BYTES:])
    assert P.classify(w, obj, wid, npages, page_bytes, P.Crc32c(use_kernel=False)) == (P.INTACT, npages)


class StoringNvme:
    """A namespace that keeps what is written (through the executor's DMA buffer) and zeroes what is trimmed."""

    def __init__(self, nlb: int = 256, max_cmd: int = 2):
        self.info = NsInfo(ctrl_path="/dev/fake0", ns_path="/dev/fake0n1", nsid=1, lba_bytes=PB, nlb=nlb,
                           max_cmd_lbas=max_cmd, max_trim_lbas=1 << 20)
        self.buf = DmaBuffer(max_cmd * PB)
        self.data = bytearray(nlb * PB)
        self.cmds = 0

    def write(self, slba, nlb, addr, *, dspec=None):
        self.cmds += 1
        self.data[slba * PB:(slba + nlb) * PB] = self.buf.mem[:nlb * PB]

    def read(self, slba, nlb, addr):
        self.buf.mem[:nlb * PB] = self.data[slba * PB:(slba + nlb) * PB]

    def deallocate(self, ranges):
        for slba, nlb in ranges:
            self.data[slba * PB:(slba + nlb) * PB] = bytes(nlb * PB)


def test_executor_writes_payloads_across_ops_and_commands_and_scans_them_back():
    dev = StoringNvme(max_cmd=2)
    ex = NvmeExecutor(dev)
    # write 100 (object 5, 5 pages) in two extents, the second cut to 1 of its 3 pages; write 101 (object 6,
    # 2 pages) whole; write 102 (object 7) trimmed after; write 103 never issued
    cols = {"op": [OP_WRITE, OP_WRITE, OP_WRITE, OP_WRITE, OP_TRIM], "lba": [10, 40, 20, 30, 30],
            "npages": [2, 1, 2, 2, 2], "pid": [0] * 5, "wid": [100, 100, 101, 102, -1], "obj": [5, 5, 6, 7, 0],
            "wpage": [0, 2, 0, 0, 0], "wpages": [5, 5, 2, 2, 0]}
    out, ran, err = ex.run(cols)
    assert err is None and ran == 5 and list(out["ncmds"]) == [1, 1, 1, 1, 1]
    assert dev.data[40 * PB: 41 * PB] == P.build_write(5, 100, 0, 5, PB)[2 * PB: 3 * PB]
    scan = {"wid": [100, 100, 101, 102, 103], "obj": [5, 5, 6, 7, 8], "lba": [10, 40, 20, 30, 50],
            "npages": [2, 3, 2, 2, 4], "wpage": [0, 2, 0, 0, 0], "wpages": [5, 5, 2, 2, 4]}
    res, totals = ex.scan(scan)
    assert list(res["wid"]) == [100, 101, 102, 103]
    assert [P.STATUS_NAMES[s] for s in res["status"]] == ["torn", "intact", "missing", "missing"]
    assert list(res["present"]) == [3, 2, 0, 0]
    assert totals["writes"] == 4 and totals["pages_read"] == 13 and totals["bytes_read"] == 13 * PB


@pytest.mark.parametrize("page_bytes,max_cmd", [(4 * PB, 3), (PB, 2), (8 * PB, 16)])
def test_pages_that_straddle_commands_are_written_exactly(page_bytes, max_cmd):
    """Units larger than MDTS or not a multiple of it: a stamp goes into the command where its page starts,
    nothing of an earlier command's stamps stays behind, and a read between writes does not leak into them."""
    dev = StoringNvme(nlb=512, max_cmd=max_cmd)
    ex = NvmeExecutor(dev)
    ex.set_page_bytes(page_bytes)
    cols = {"op": [OP_WRITE, OP_READ, OP_WRITE, OP_WRITE], "lba": [0, 0, 5, 3], "npages": [3, 3, 2, 2],
            "pid": [0] * 4, "wid": [7, -1, 8, 8], "obj": [1, 0, 2, 2], "wpage": [0, 0, 0, 2], "wpages": [3, 0, 4, 4]}
    out, ran, err = ex.run(cols)
    assert err is None and ran == 4
    w7, w8 = P.build_write(1, 7, 0, 3, page_bytes), P.build_write(2, 8, 0, 4, page_bytes)
    pb = page_bytes
    assert dev.data[0: 3 * pb] == w7
    assert dev.data[5 * pb: 7 * pb] == w8[:2 * pb] and dev.data[3 * pb: 5 * pb] == w8[2 * pb:]
    res, _ = ex.scan({"wid": [7, 8, 8], "obj": [1, 2, 2], "lba": [0, 5, 3], "npages": [3, 2, 2], "wpage": [0, 0, 2],
                      "wpages": [3, 4, 4]})
    assert list(res["status"]) == [P.INTACT, P.INTACT]


def test_the_scan_probes_stamps_before_reading_a_write_whole():
    """Pages of 8 LBAs: a torn or missing write is known from one LBA a page; only whole writes are read
    whole (for their CRC)."""
    dev = StoringNvme(nlb=512, max_cmd=16)
    ex = NvmeExecutor(dev)
    ex.set_page_bytes(8 * PB)
    out, ran, err = ex.run({"op": [OP_WRITE, OP_WRITE], "lba": [0, 10], "npages": [3, 2], "pid": [0, 0],
                            "wid": [1, 2], "obj": [5, 6], "wpage": [0, 0], "wpages": [3, 3]})
    assert err is None
    res, totals = ex.scan({"wid": [1, 2, 3], "obj": [5, 6, 7], "lba": [0, 10, 20], "npages": [3, 3, 4],
                           "wpage": [0, 0, 0], "wpages": [3, 3, 4]})
    assert [P.STATUS_NAMES[s] for s in res["status"]] == ["intact", "torn", "missing"]
    assert list(res["present"]) == [3, 2, 0]
    assert totals["pages_probed"] == 10 and totals["pages_read"] == 3
    assert totals["bytes_read"] == 3 * 8 * PB + 10 * PB


# --- the kill point ------------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50_000), st.integers(0, 80_000), st.integers(1, 40)), min_size=1,
                max_size=12),
       st.integers(0, 60_000), st.integers(0, 20_000))
def test_units_on_media_is_the_fault_models_rule(ops, at_ns, flush_ns):
    """What the host sends before the kill is exactly what lose_inflight leaves on the media."""
    ops = [(a, a + s, n) for a, s, n in ops if a <= at_ns]  # the guest only gets ops of events up to T
    if not ops:
        return
    arr = np.array([o[0] for o in ops], np.int64)
    done = np.array([o[1] for o in ops], np.int64)
    n = np.array([o[2] for o in ops], np.int64)
    lba = np.concatenate(([0], np.cumsum(n)[:-1]))  # every op its own extent, every op its own write
    w = np.arange(1, len(ops) + 1, dtype=np.int64)
    seq = np.repeat(w, n)
    prev = np.zeros_like(seq)
    hit = np.zeros(len(ops) + 1, np.int64)
    log = FaultLog(row=np.arange(len(ops), dtype=np.int64), op=np.full(len(ops), OP_WRITE, np.int8), lba=lba,
                   npages=n, arr=arr, done=done, w=w, kp=np.array([len(ops)], np.int64))
    lose_inflight(log, Media(lba_seq=seq, lba_prev=prev), len(ops), at_ns, flush_ns, hit)
    kept = np.bincount(seq, minlength=len(ops) + 1)[1:]
    assert units_on_media(arr, done, n, at_ns, flush_ns).tolist() == kept.tolist()


def test_payload_columns_number_the_pages_of_each_write():
    op = np.array([OP_TRIM, OP_WRITE, OP_WRITE, OP_WRITE, OP_READ, OP_WRITE, OP_WRITE], np.int8)
    src = np.array([SRC_USER, SRC_USER, SRC_USER, SRC_USER, SRC_USER, SRC_GC, SRC_USER], np.int8)
    row = np.array([4, 5, 5, 7, 8, 9, 5])
    obj = np.array([1, 2, 2, 3, 2, 4, 2])
    npages = np.array([9, 3, 2, 4, 5, 6, 1], np.int32)
    pl = payload_columns(op, src, row, obj, npages)
    assert pl["wid"].tolist() == [-1, 5, 5, 7, -1, -1, 5]  # gc moves and reads carry no payload
    assert pl["wpage"].tolist() == [0, 0, 3, 0, 0, 0, 5]
    assert pl["wpages"].tolist() == [0, 6, 6, 4, 0, 0, 6]


def _batch(rel, op, npages, arrival=None):
    n = len(op)
    rel = np.asarray(rel, np.int64)
    return {"op": np.asarray(op, np.int8), "lba": np.arange(n, dtype=np.int64) * 100,
            "npages": np.asarray(npages, np.int32), "pid": np.zeros(n, np.int16),
            "arrival_ns": rel if arrival is None else np.asarray(arrival, np.int64),
            "src": np.full(n, SRC_USER, np.int8), "row": np.arange(n, dtype=np.int64) + 10,
            "obj": np.arange(n, dtype=np.int64) + 1, "rel": rel}


def test_before_kill_sends_what_the_model_has_on_the_media():
    pw = GuestPowerLoss(parse_fault("power-loss@1000ns,flush_ns=100ns"), time_scale=1.0)
    b = _batch([0, 200, 500, 800, 1000, 1001], [OP_WRITE, OP_WRITE, OP_TRIM, OP_WRITE, OP_WRITE, OP_WRITE],
               [4, 10, 2, 5, 3, 2])
    done = np.array([400, 1400, 600, 2800, 1200, 1300])
    send, beyond = pw.before_kill(b, done)
    # write 0 done at 400 (+100 flush) -> whole; write 1: units land at 320, 440, ..., 1400 (+100): 5 of 10
    # by 1000; the trim goes whole; write 3: 2000 ns for 5 units, the first at 1200 + 100: none; write 4
    # arrives at T, nothing lands by then; the event at 1001 is after the kill
    assert beyond is True
    assert send["op"].tolist() == [OP_WRITE, OP_WRITE, OP_TRIM]
    assert send["npages"].tolist() == [4, 5, 2] and send["wid"].tolist() == [10, 11, -1]
    assert send["wpages"].tolist() == [4, 10, 0]
    ext = pw.extents()
    assert ext["wid"].tolist() == [10, 11, 13, 14] and ext["npages"].tolist() == [4, 10, 5, 3]  # whole extents
    assert pw.sent == {"ops": 3, "write_ops": 4, "write_ops_cut": 1, "write_ops_dropped": 2, "pages_written": 9,
                       "pages_not_issued": 5 + 5 + 3}
    # time_scale: T is trace time for events, device time for units
    pw2 = GuestPowerLoss(parse_fault("power-loss@1000ns"), time_scale=2.0)
    assert pw2.device_at_ns == 500 and pw2.at_ns == 1000


def test_compare_names_every_write_the_guest_and_the_model_disagree_on():
    pw = GuestPowerLoss(parse_fault("power-loss@1ms"), time_scale=1.0)
    media = {"row": np.array([10, 11, 12, 13]), "obj": np.array([1, 2, 3, 4]), "pages": np.array([4, 4, 4, 4]),
             "on_media": np.array([4, 2, 0, 4])}
    pw.scan = {"wid": np.array([10, 11, 12, 13]), "status": np.array([P.INTACT, P.TORN, P.MISSING, P.INTACT]),
               "present": np.array([4, 2, 0, 4]), "totals": {"writes": 4}}
    ok = pw.compare(media)
    assert ok["ok"] and ok["agree"] == 4 and ok["guest"] == {"intact": 2, "torn": 1, "missing": 1, "corrupt": 0}
    pw.scan = {"wid": np.array([10, 11, 12]), "status": np.array([P.INTACT, P.TORN, P.CORRUPT]),
               "present": np.array([4, 3, 4]), "totals": {"writes": 3}}
    bad = pw.compare(media)
    assert not bad["ok"] and bad["agree"] == 1 and bad["disagree"] == 2 and bad["writes_not_scanned"] == 1
    assert bad["mismatches"][0] == {"write_row": 11, "object": 2, "pages": 4, "model": "torn",
                                    "model_pages_on_media": 2, "guest": "torn", "guest_pages_present": 3}
    assert bad["mismatches"][1]["model"] == "missing" and bad["mismatches"][1]["guest"] == "corrupt"


def test_guest_histograms_merge_across_a_restart():
    rng = np.random.default_rng(3)
    a, b, both = Histogram(), Histogram(), Histogram()
    for i, v in enumerate(rng.integers(1_000, 5_000_000, 3000)):
        (a if i % 3 else b).add(int(v))
        both.add(int(v))

    def view(h):
        d = h.to_dict()
        return {"write": {"n": d["n"], "min_ns": d["min_ns"], "max_ns": d["max_ns"], "sum_ns": d["sum_ns"],
                          "buckets": d["buckets"]}}

    m = merge_histograms([view(a), view(b), {}])["write"]
    d = both.to_dict()
    assert (m["n"], m["min_ns"], m["max_ns"], m["sum_ns"]) == (d["n"], d["min_ns"], d["max_ns"], d["sum_ns"])
    assert m["percentiles_ns"] == percentiles(d["buckets"], list(FIO_PERCENTILES))
