"""NVMe passthrough from Python's standard library: fcntl.ioctl on the namespace.

The 6.12 guest kernel has no block-layer write-stream plumbing, so placement
hints (DTYPE=2, DSPEC=placement id) only reach the device through passthrough
commands. ``struct nvme_passthru_cmd64`` (80 bytes, NVME_IOCTL_IO64_CMD) is used
for I/O so zone append's 64-bit assigned LBA comes back whole; admin commands
use the 72-byte ``struct nvme_passthru_cmd`` on the controller node.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import struct
from dataclasses import dataclass, field

# include/uapi/linux/nvme_ioctl.h: _IOWR('N', nr, struct)
NVME_IOCTL_ADMIN_CMD = 0xC0484E41  # struct nvme_passthru_cmd (72 bytes)
NVME_IOCTL_IO_CMD = 0xC0484E43
NVME_IOCTL_IO64_CMD = 0xC0504E48  # struct nvme_passthru_cmd64 (80 bytes)

# opcode, flags, rsvd1, nsid, cdw2, cdw3, metadata, addr, metadata_len, data_len,
# cdw10..cdw15, timeout_ms, [rsvd2], result
CMD32 = struct.Struct("<BBHIIIQQII6III")
CMD64 = struct.Struct("<BBHIIIQQII6IIIQ")
assert CMD32.size == 72 and CMD64.size == 80

# I/O opcodes
NVME_CMD_WRITE = 0x01
NVME_CMD_READ = 0x02
NVME_CMD_DSM = 0x09
NVME_CMD_IO_MGMT_RECV = 0x12
NVME_CMD_IO_MGMT_SEND = 0x1D
NVME_CMD_ZONE_MGMT_SEND = 0x79
NVME_CMD_ZONE_MGMT_RECV = 0x7A
NVME_CMD_ZONE_APPEND = 0x7D
# admin opcodes
NVME_ADM_GET_LOG_PAGE = 0x02
NVME_ADM_IDENTIFY = 0x06

NVME_DIRECTIVE_DATA_PLACEMENT = 2
ZSA_CLOSE, ZSA_FINISH, ZSA_OPEN, ZSA_RESET = 1, 2, 3, 4

LOG_SMART = 0x02
LOG_FDP_CONFIGS = 0x20
LOG_FDP_RUH_USAGE = 0x21
LOG_FDP_STATS = 0x22
LOG_FDP_EVENTS = 0x23
ZONE_STATES = {1: "empty", 2: "implicitly_open", 3: "explicitly_open", 4: "closed", 0xD: "read_only", 0xE: "full", 0xF: "offline"}
FDP_EVENT_TYPES = {0x0: "ru_not_fully_written", 0x1: "ru_time_limit_exceeded", 0x2: "ctrl_reset_modified_ruh",
                   0x3: "invalid_placement_id", 0x80: "media_reallocated", 0x81: "implicitly_modified_ruh"}


STATUS_NAMES = {
    0x002: "Invalid Field in Command", 0x004: "Data Transfer Error", 0x00B: "Invalid Namespace or Format",
    0x080: "LBA Out of Range", 0x081: "Capacity Exceeded", 0x1B8: "Zone Boundary Error", 0x1B9: "Zone Is Full",
    0x1BA: "Zone Is Read Only", 0x1BB: "Zone Is Offline", 0x1BC: "Zone Invalid Write",
    0x1BD: "Too Many Active Zones", 0x1BE: "Too Many Open Zones", 0x1BF: "Invalid Zone State Transition",
}


class NvmeError(Exception):
    """A command the device (status > 0) or the kernel (status < 0, -errno) refused."""

    def __init__(self, what: str, status: int):
        self.status = status
        if status < 0:
            detail = f"{errno.errorcode.get(-status, '?')} ({os.strerror(-status)})"
        else:
            name = STATUS_NAMES.get(status, f"SCT {status >> 8 & 7}, SC 0x{status & 0xff:02x}")
            detail = f"NVMe status 0x{status:x} ({name})"
        super().__init__(f"{what}: {detail}")


class DmaBuffer:
    """Page-aligned memory the kernel can map for a passthrough command."""

    def __init__(self, nbytes: int):
        self.nbytes = max(nbytes, mmap.PAGESIZE)
        self.mem = mmap.mmap(-1, self.nbytes)
        self.view = memoryview(self.mem)
        self.addr = ctypes.addressof(ctypes.c_char.from_buffer(self.mem))


@dataclass
class NsInfo:
    """What the agent needs to know about the namespace (from sysfs and Identify)."""

    ctrl_path: str
    ns_path: str
    nsid: int
    lba_bytes: int
    nlb: int  # namespace size in logical blocks
    max_cmd_lbas: int  # MDTS in LBAs (and <= 65536, NLB is 16 bits)
    max_trim_lbas: int  # per DSM range
    zoned: bool = False
    zone_lbas: int = 0
    nr_zones: int = 0
    zasl_lbas: int = 0
    max_open_zones: int = 0
    max_active_zones: int = 0
    fdp: bool = False
    vwc: bool = False  # the controller reports a volatile write cache (Identify Controller VWC bit 0)
    nruh: int = 0
    ruh_ids: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _sysfs_int(path: str, default: int = 0) -> int:
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return default


def nvme_status(result_rc: int) -> int:
    """ioctl return value -> NVMe status (SCT<<8|SC), dropping the DNR/More bits."""
    return result_rc & 0x7FF



def _passthru(fd: int, request: int, layout: struct.Struct, cmd: bytearray, what: str) -> int:
    """Run one passthrough ioctl; the command's result field (last member) on success, NvmeError otherwise."""
    try:
        rc = fcntl.ioctl(fd, request, cmd, True)
    except OSError as exc:
        raise NvmeError(what, -exc.errno) from None
    if rc:
        raise NvmeError(what, nvme_status(rc))
    return layout.unpack_from(cmd)[-1]

class NvmeDevice:
    """One namespace (block node for I/O) and its controller (char node for admin)."""

    def __init__(self, ns_name: str = "nvme0n1", ctrl_name: str = "nvme0"):
        self.ns_path = f"/dev/{ns_name}"
        self.ctrl_path = f"/dev/{ctrl_name}"
        self.fd = os.open(self.ns_path, os.O_RDWR)
        self.cfd = os.open(self.ctrl_path, os.O_RDWR)
        self.nsid = fcntl.ioctl(self.fd, 0x4E40)  # NVME_IOCTL_ID
        self._cmd64 = bytearray(CMD64.size)
        self._cmd32 = bytearray(CMD32.size)
        self.info = self._probe(ns_name)
        self.buf = DmaBuffer(max(self.info.max_cmd_lbas * self.info.lba_bytes, 8192))

    # --- raw commands --------------------------------------------------------
    def io(self, opcode: int, *, addr: int = 0, data_len: int = 0, cdw10=0, cdw11=0, cdw12=0, cdw13=0,
           cdw14=0, cdw15=0) -> int:
        """Issue one I/O command; returns the 64-bit result (DW0/DW1), raises NvmeError on failure."""
        cmd = self._cmd64
        CMD64.pack_into(cmd, 0, opcode, 0, 0, self.nsid, 0, 0, 0, addr, 0, data_len,
                        cdw10, cdw11, cdw12, cdw13, cdw14, cdw15, 0, 0, 0)
        return _passthru(self.fd, NVME_IOCTL_IO64_CMD, CMD64, cmd, f"opcode 0x{opcode:02x}")

    def admin(self, opcode: int, buf: DmaBuffer | None, data_len: int, *, nsid: int = 0, cdw10=0, cdw11=0,
              cdw12=0, cdw13=0, cdw14=0, cdw15=0) -> int:
        cmd = self._cmd32
        CMD32.pack_into(cmd, 0, opcode, 0, 0, nsid, 0, 0, 0, buf.addr if buf else 0, 0, data_len,
                        cdw10, cdw11, cdw12, cdw13, cdw14, cdw15, 0, 0)
        return _passthru(self.cfd, NVME_IOCTL_ADMIN_CMD, CMD32, cmd, f"admin opcode 0x{opcode:02x}")

    # --- data commands (one command each; callers split) ---------------------
    def write(self, slba: int, nlb: int, addr: int, *, dspec: int | None = None) -> None:
        cdw12 = (nlb - 1) & 0xFFFF
        cdw13 = 0
        if dspec is not None:
            cdw12 |= NVME_DIRECTIVE_DATA_PLACEMENT << 20
            cdw13 = (dspec & 0xFFFF) << 16
        self.io(NVME_CMD_WRITE, addr=addr, data_len=nlb * self.info.lba_bytes,
                cdw10=slba & 0xFFFFFFFF, cdw11=slba >> 32, cdw12=cdw12, cdw13=cdw13)

    def read(self, slba: int, nlb: int, addr: int) -> None:
        self.io(NVME_CMD_READ, addr=addr, data_len=nlb * self.info.lba_bytes,
                cdw10=slba & 0xFFFFFFFF, cdw11=slba >> 32, cdw12=(nlb - 1) & 0xFFFF)

    def deallocate(self, ranges: list[tuple[int, int]]) -> None:
        """DSM with the AD bit: ``ranges`` of (slba, nlb), at most 256."""
        b = self.buf
        for i, (slba, nlb) in enumerate(ranges):
            struct.pack_into("<IIQ", b.mem, 16 * i, 0, nlb, slba)
        self.io(NVME_CMD_DSM, addr=b.addr, data_len=16 * len(ranges), cdw10=len(ranges) - 1, cdw11=1 << 2)

    def zone_append(self, zslba: int, nlb: int, addr: int) -> int:
        return self.io(NVME_CMD_ZONE_APPEND, addr=addr, data_len=nlb * self.info.lba_bytes,
                       cdw10=zslba & 0xFFFFFFFF, cdw11=zslba >> 32, cdw12=(nlb - 1) & 0xFFFF)

    def zone_action(self, zslba: int, zsa: int) -> None:
        self.io(NVME_CMD_ZONE_MGMT_SEND, cdw10=zslba & 0xFFFFFFFF, cdw11=zslba >> 32, cdw13=zsa)

    def ruh_update(self, pids: list[int]) -> None:
        b = self.buf
        struct.pack_into(f"<{len(pids)}H", b.mem, 0, *pids)
        self.io(NVME_CMD_IO_MGMT_SEND, addr=b.addr, data_len=2 * len(pids), cdw10=1 | (len(pids) - 1) << 16)

    # --- queries ----------------------------------------------------------------
    def ruh_status(self) -> list[dict]:
        """I/O Management Receive, Reclaim Unit Handle Status: one dict per placement id.

        Asks for the header first, then for exactly the descriptors there are: the 6.12 kernel maps a
        passthrough buffer whose pages are not physically contiguous with an SGL of the full ``data_len``,
        and QEMU refuses an SGL longer than what it transfers (status 0xf, Data SGL Length Invalid) - so
        a generous buffer failed now and then, depending on where the guest put its pages."""
        b = self.buf
        self.io(NVME_CMD_IO_MGMT_RECV, addr=b.addr, data_len=16, cdw10=1, cdw11=16 // 4 - 1)
        (nruhsd,) = struct.unpack_from("<H", b.mem, 14)
        n = 16 + 32 * nruhsd
        self.io(NVME_CMD_IO_MGMT_RECV, addr=b.addr, data_len=n, cdw10=1, cdw11=n // 4 - 1)
        (nruhsd,) = struct.unpack_from("<H", b.mem, 14)
        out = []
        for i in range(nruhsd):
            pid, ruhid, earutr, ruamw = struct.unpack_from("<HHIQ", b.mem, 16 + 32 * i)
            out.append({"pid": pid, "ruhid": ruhid, "earutr_s": earutr, "ruamw_lbas": ruamw})
        return out

    def get_log(self, lid: int, nbytes: int, *, lsi: int = 0, lsp: int = 0, nsid: int = 0xFFFFFFFF,
                offset: int = 0) -> bytes:
        numd = nbytes // 4 - 1
        b = self.buf
        self.admin(NVME_ADM_GET_LOG_PAGE, b, nbytes, nsid=nsid,
                   cdw10=lid | (lsp & 0x7F) << 8 | (numd & 0xFFFF) << 16,
                   cdw11=(numd >> 16) & 0xFFFF | (lsi & 0xFFFF) << 16,
                   cdw12=offset & 0xFFFFFFFF, cdw13=offset >> 32)
        return bytes(b.view[:nbytes])

    def identify(self, cns: int, *, nsid: int = 0, csi: int = 0) -> bytes:
        b = self.buf
        self.admin(NVME_ADM_IDENTIFY, b, 4096, nsid=nsid, cdw10=cns, cdw11=csi << 24)
        return bytes(b.view[:4096])

    def zone_report(self) -> list[dict]:
        """Report Zones (all), in chunks that fit one command."""
        info = self.info
        per_cmd = max(1, (info.max_cmd_lbas * info.lba_bytes - 64) // 64)
        zones = []
        slba = 0
        b = self.buf
        while len(zones) < info.nr_zones:
            want = min(per_cmd, info.nr_zones - len(zones))
            n = 64 + 64 * want
            n = (n + 3) // 4 * 4
            self.io(NVME_CMD_ZONE_MGMT_RECV, addr=b.addr, data_len=n, cdw10=slba & 0xFFFFFFFF,
                    cdw11=slba >> 32, cdw12=n // 4 - 1, cdw13=0 | 1 << 16)
            (nr,) = struct.unpack_from("<Q", b.mem, 0)
            if nr == 0:
                break
            for i in range(min(nr, want)):
                zt, zs, za = struct.unpack_from("<BBB", b.mem, 64 + 64 * i)
                zcap, zslba, wp = struct.unpack_from("<QQQ", b.mem, 64 + 64 * i + 8)
                zones.append({"zslba": zslba, "zcap_lbas": zcap, "wp": wp,
                              "state": ZONE_STATES.get(zs >> 4, f"0x{zs >> 4:x}"), "type": zt & 0xF})
            slba = zones[-1]["zslba"] + info.zone_lbas
        return zones

    # --- parsed log pages -----------------------------------------------------
    def smart(self) -> dict:
        d = self.get_log(LOG_SMART, 512)
        u128 = lambda off: int.from_bytes(d[off:off + 16], "little")  # noqa: E731
        return {
            "critical_warning": d[0],
            "temperature_k": struct.unpack_from("<H", d, 1)[0],
            "percent_used": d[5],
            # data units are thousands of 512-byte units (NVMe spec), rounded up by the device
            "data_units_read": u128(32),
            "data_units_written": u128(48),
            "host_read_commands": u128(64),
            "host_write_commands": u128(80),
            "media_errors": u128(160),
            # vendor-specific bytes 192-255: FEMU's bbssd puts its host-programmed pages at 200 and the pages its
            # GC relocated at 208 (u64 each); zero on devices that leave them reserved (QEMU's NVMe)
            "vendor_u64_200": struct.unpack_from("<Q", d, 200)[0],
            "vendor_u64_208": struct.unpack_from("<Q", d, 208)[0],
        }

    def fdp_configs(self) -> dict:
        head = self.get_log(LOG_FDP_CONFIGS, 16, lsi=1)
        numfdpc, ver, size = struct.unpack_from("<HBxI", head, 0)
        d = self.get_log(LOG_FDP_CONFIGS, max(16, (size + 3) // 4 * 4), lsi=1)
        configs = []
        off = 16
        for _ in range(numfdpc + 1):
            ds, fdpa, vss, nrg, nruh, maxpids, nnss, runs, erutl = struct.unpack_from("<HBBIHHIQI", d, off)
            ruh_types = [d[off + 64 + 4 * i] for i in range(nruh)]
            configs.append({
                "valid": bool(fdpa & 0x80), "rgif": fdpa & 0xF, "nrg": nrg, "nruh": nruh,
                "maxpids": maxpids + 1, "nnss": nnss, "ru_bytes": runs, "erutl_s": erutl,
                "ruh_types": ["initially" if t == 1 else "persistently" if t == 2 else t for t in ruh_types],
            })
            off += ds
        return {"version": ver, "configs": configs}

    def fdp_usage(self) -> list[dict]:
        n = 8 + 8 * 128
        d = self.get_log(LOG_FDP_RUH_USAGE, n, lsi=1)
        (nruh,) = struct.unpack_from("<H", d, 0)
        attrs = {0: "unused", 1: "host", 2: "controller"}
        return [{"ruhid": i, "ruha": attrs.get(d[8 + 8 * i], d[8 + 8 * i])} for i in range(nruh)]

    def fdp_stats(self) -> dict:
        d = self.get_log(LOG_FDP_STATS, 64, lsi=1)
        u128 = lambda off: int.from_bytes(d[off:off + 16], "little")  # noqa: E731
        return {"host_bytes_written": u128(0), "media_bytes_written": u128(16), "media_bytes_erased": u128(32)}

    def fdp_events(self, host: bool = True) -> list[dict]:
        n = 64 + 64 * 63
        d = self.get_log(LOG_FDP_EVENTS, n, lsi=1, lsp=0 if host else 1)
        (nevents,) = struct.unpack_from("<I", d, 0)
        out = []
        for i in range(min(nevents, 63)):
            o = 64 + 64 * i
            etype, flags, pid = struct.unpack_from("<BBH", d, o)
            (ts,) = struct.unpack_from("<Q", d, o + 4)
            out.append({"type": FDP_EVENT_TYPES.get(etype, etype), "pid": pid, "timestamp": ts})
        return out

    # --- setup ------------------------------------------------------------------
    def _probe(self, ns_name: str) -> NsInfo:
        q = f"/sys/block/{ns_name}/queue"
        lba = _sysfs_int(f"{q}/logical_block_size", 512)
        nlb = _sysfs_int(f"/sys/block/{ns_name}/size") * 512 // lba
        max_hw_kb = _sysfs_int(f"{q}/max_hw_sectors_kb", 128)
        max_cmd = max(1, min(max_hw_kb * 1024 // lba, 65536))
        discard = _sysfs_int(f"{q}/discard_max_hw_bytes", 0)
        max_trim = max(1, min(discard // lba if discard else (1 << 32) - 1, (1 << 32) - 1))
        info = NsInfo(ctrl_path=self.ctrl_path, ns_path=self.ns_path, nsid=self.nsid, lba_bytes=lba, nlb=nlb,
                      max_cmd_lbas=max_cmd, max_trim_lbas=max_trim)
        model = ""
        try:
            with open(f"{q}/zoned") as f:
                model = f.read().strip()
        except OSError:
            pass
        if model == "host-managed":
            info.zoned = True
            info.zone_lbas = _sysfs_int(f"{q}/chunk_sectors") * 512 // lba
            info.nr_zones = _sysfs_int(f"{q}/nr_zones")
            zab = _sysfs_int(f"{q}/zone_append_max_bytes")
            info.zasl_lbas = max(1, min(zab // lba if zab else max_cmd, max_cmd))
            info.max_open_zones = _sysfs_int(f"{q}/max_open_zones")
            info.max_active_zones = _sysfs_int(f"{q}/max_active_zones")
            try:  # Identify Namespace, Zoned command set: MAR/MOR (0's based, all-ones = no limit)
                self.buf = DmaBuffer(4096)
                mar, mor = struct.unpack_from("<II", self.identify(5, nsid=self.nsid, csi=2), 4)
                info.max_active_zones = 0 if mar == 0xFFFFFFFF else mar + 1
                info.max_open_zones = 0 if mor == 0xFFFFFFFF else mor + 1
                # Identify Controller, Zoned command set: ZASL (2^n minimum memory pages; 0 = MDTS). The
                # device enforces it, so take it from there rather than from the block layer's view.
                zasl = self.identify(6, csi=2)[0]
                if zasl:  # in units of the controller memory page size, which Linux sets to 4 KiB on x86
                    info.zasl_lbas = max(1, min((4096 << zasl) // lba, max_cmd))
            except NvmeError:
                pass
        # FDP: the controller says so in CTRATT bit 19 (Identify Controller bytes 96-99).
        self.buf = DmaBuffer(4096 + 16 + 32 * 128)
        try:
            ident = self.identify(1)
            ctratt = struct.unpack_from("<I", ident, 96)[0]
            info.vwc = bool(ident[525] & 1)
        except NvmeError:
            ctratt = 0
        if ctratt & (1 << 19):
            # an FDP device without its handles would refuse every placement id: fail the setup loudly
            try:
                st = self.ruh_status()
            except NvmeError as exc:
                raise RuntimeError(f"FDP controller, but RUH status failed: {exc}") from None
            if not st:
                raise RuntimeError("FDP controller, but the namespace reports no reclaim unit handles")
            info.fdp = True
            info.nruh = len(st)
            info.ruh_ids = [s["ruhid"] for s in st]
        return info
