"""Faults and recovery contracts on the Mooncake trace (README "Faults and recovery contracts"):
``scripts/bench_faults.py``'s runs, their speed and what each contract costs and catches."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testbed.docfigures import fmt
from testbed.docfigures.base import FIGURE_SETS, BenchFigureSet

RUNS = ("baseline", "faults+none", "faults+checksum", "faults+version", "faults+full")
OUTCOMES = ("reused", "detected", "missing", "wrong")
GiB = 1 << 30


def _after(f: dict[str, Any]) -> dict[str, int]:
    """Loads after the first fault, by outcome (objects): the total less those before the faults."""
    return {o: f["total"]["outcomes"][o]["objects"] - f["before_faults"]["outcomes"][o]["objects"] for o in OUTCOMES}


@FIGURE_SETS.register("faults")
class Faults(BenchFigureSet):
    summary = "scripts/bench_faults.py: Mooncake trace on fdp, no faults and a fault set under each contract"
    needs_mooncake = True
    script = "scripts/bench_faults.py"
    args = ("--runs", "3", "--cache", "{w}")

    def extract(self, work: Path) -> dict[str, Any]:
        doc = json.loads((work / "bench_faults.json").read_text())
        runs: dict[str, Any] = {}
        for name in RUNS:
            r = doc["runs"][name]
            row = {"events_per_s_median": r["events_per_s_median"], "events_per_s_all": r["events_per_s_all"],
                   "fault_s_median": r["fault_s_median"], "user_bytes_written": r["user_bytes_written"]}
            f = r["faults"]
            if f:
                ct = f["contract"]
                row.update(after=_after(f), phantom_loads=f["phantom_loads"],
                           media_errors_sampled=f["media_errors_sampled"], index_key=f["index_key"],
                           contract={k: ct[k] for k in ("header_bytes_per_object", "header_bytes_written",
                                                         "extra_bytes_written", "extra_bytes_read", "objects_written",
                                                         "index_entry_bytes", "index_metadata_bytes_peak")},
                           injected=[{"kind": i["kind"], "state": i["state"],
                                      "outcomes": {o: i["outcomes"][o]["objects"] for o in OUTCOMES},
                                      "recompute_tokens": i["recompute_tokens"], "recompute_ns": i["recompute_ns"],
                                      "ttft_added_ns_mean": i["ttft_added_ns_mean"]} for i in f["injected"]])
            runs[name] = row
        return {"events": doc["events"], "runs_per_config": doc["runs_per_config"],
                "loadavg_1min": doc["loadavg_1min"], "runs": runs}

    def blocks(self, fig: dict[str, Any]) -> dict[str, str]:
        R = fig["runs"]
        head = (f"Mooncake conversation trace ({fig['events'] / 1e6:.2f}M events, 32 MiB objects, fdp, 2 cores shared; "
                f"`scripts/bench_faults.py`, medians of {fig['runs_per_config']}; faults: power loss at ~30% with a "
                "1-minute-old index, media errors 1e-11/bit from 50%, missed model update at 70%):")
        lines = [fmt.wrap(head), "",
                 "| run | events/s | fault pass | user bytes written | contract: extra written / read, index peak "
                 "| after the faults: reused / detected / missing / wrong |", "|---|---|---|---|---|---|"]
        for name in RUNS:
            r = R[name]
            ct = r.get("contract")
            cost = (f"+{ct['extra_bytes_written'] / GiB:,.0f} GiB / +{ct['extra_bytes_read'] / GiB:,.0f} GiB, "
                    f"{ct['index_metadata_bytes_peak'] / (1 << 20):.2f} MiB") if ct else "-"
            after = " / ".join(f"{r['after'][o]:,}" for o in OUTCOMES) if ct else "-"
            lines.append(f"| {name} | {r['events_per_s_median'] / 1e6:.2f} M | {r['fault_s_median']:.2f} s | "
                         f"{r['user_bytes_written'] / (1 << 40):.3f} TiB | {cost} | {after} |")
        table = "\n".join(lines)
        speeds = [v for n in RUNS for v in R[n]["events_per_s_all"]]
        load = fig["loadavg_1min"]
        none, ck, ver, full = (R[f"faults+{c}"] for c in ("none", "checksum", "version", "full"))
        pl, me, vd = none["injected"]
        st = pl["state"]
        me_c = ck["injected"][1]
        vd_v, vd_f = ver["injected"][2], full["injected"][2]
        c = full["contract"]
        added = c["extra_bytes_written"] / none["user_bytes_written"]
        contracts = ("none", "checksum", "version", "full")

        def under(i: int, outcome: str) -> str:
            """The contracts under which fault ``i`` had loads with this outcome."""
            return "/".join(f"`{k}`" for k in contracts if R[f"faults+{k}"]["injected"][i]["outcomes"][outcome])
        text = (
            f"Measured with a load average of {load[0]:.1f} at the start and {load[1]:.1f} at the end on the 2 "
            f"cores: events/s ranged {min(speeds) / 1e6:.2f}-{max(speeds) / 1e6:.2f} M over all runs. The power loss "
            f"(50 ms after an SSD write burst) finds {st['write_ops_lost']} writes in flight: {st['torn_objects']} torn "
            f"(the units of an op reach the media in order) and {st['lost_objects']} lost, {st['stale_entries']:,} "
            f"stale index entries, {st['gpu_copies_lost']:,} gpu and {st['cpu_copies_lost']:,} cpu copies gone; "
            f"{pl['outcomes']['missing']:,} loads then miss ({pl['recompute_tokens']:,} tokens, "
            f"{fmt.ns(pl['recompute_ns'])} of prefill)"
            + ("; none of the torn objects is loaded again and no stale entry is looked up (no phantom loads)."
               if pl["outcomes"]["wrong"] == 0 and none["phantom_loads"] == 0 else
               f"; under `none` {pl['outcomes']['wrong']:,} loads are then served wrong, through stale entries of "
               f"the index keyed by content ({none['phantom_loads']:,} creates of a chunk whose content it still lists "
               f"became phantom loads: see [a stale index](#a-stale-index)), "
               f"{full['injected'][0]['outcomes']['wrong']:,} under `full`.")
            + f" After the media-error fault, until the model update, {me['outcomes']['wrong']:,} loads are served "
            f"wrong under `none`: silent media errors ({none['media_errors_sampled']:,} drawn over the rest of the "
            f"run) and copies served wrong before, loaded again; fewer under {under(1, 'detected')} "
            f"({me_c['outcomes']['detected']:,} detected by `checksum`); "
            f"the missed model update serves {vd['outcomes']['wrong']:,} loads of old KV under `none` (a copy served "
            f"wrong stays wrong and is loaded again); `checksum` still serves {ck['injected'][2]['outcomes']['wrong']:,} "
            f"of them wrong (intact data of an old version passes a checksum), a header naming the version catches "
            f"it "
            f"({vd_f['outcomes']['detected']:,} detected under `full`, each "
            f"then recomputed: {vd_f['recompute_tokens']:,} tokens, {fmt.ns(vd_f['recompute_ns'])} of prefill, "
            f"+{fmt.ns(vd_f['ttft_added_ns_mean'])} TTFT per recomputed chunk; `version` alone leaves "
            f"{vd_v['outcomes']['wrong']:,} wrong). The contract's cost on this trace is dominated by alignment, not "
            f"header bytes: {c['header_bytes_per_object']} B x {c['objects_written']:,} objects = "
            f"{fmt.nbytes(c['header_bytes_written'])} of headers, but every 32 MiB chunk fills its 1 MiB units, so "
            f"the header adds a 33rd unit: +{c['extra_bytes_written'] / GiB:,.0f} GiB ({fmt.pct(added)} of the user "
            f"bytes) written and +{c['extra_bytes_read'] / GiB:,.0f} GiB read; any contract with a header pays it. "
            f"The index keeps {ver['contract']['index_entry_bytes']} B (version) to {c['index_entry_bytes']} B (full) "
            f"per entry: {fmt.nbytes(c['index_metadata_bytes_peak'])} at the peak."
        )
        return {"table": table, "text": fmt.wrap(text)}
