"""A stale host index on the Mooncake trace (faults guide, "A stale index"): the index restored 60 s and 120 s
back at mid-trace, keyed by content (format v2) under each contract, and keyed by object id (the same trace
as format v1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testbed.docfigures import fmt
from testbed.docfigures.base import FIGURE_SETS, FigureSet, run_commands

AT_S = 1800
AGES_S = (60, 120)
CONTRACTS = ("none", "checksum", "version", "lease", "full")
OUTCOMES = ("reused", "detected", "missing", "wrong")
GiB = 1 << 30
IMPORT = ("trace", "import", "mooncake", "{mc}", "-o", "{w}/mc.parquet")
V1 = "mc-v1.parquet"  # written between the import and the replays (as_v1)


def _fault(age_s: int) -> str:
    return f"stale-index@{AT_S}s,age_ns={age_s}s"


def _replay(trace: str, age_s: int, contract: str, out: str) -> tuple[str, ...]:
    return ("replay", f"{{w}}/{trace}", "--device", "fdp", "--hints", "none", "--fault", _fault(age_s),
            "--contract", contract, "--no-plots", "-q", "-o", f"{{w}}/{out}")


def as_v1(src: Path, dst: Path) -> None:
    """``src``'s events as format v1 wrote them: no content_key column, format_version 1 in the metadata."""
    import pyarrow.parquet as pq

    from kvbed.core.atomicio import atomic_path
    from kvreplay import schema as S

    table = pq.read_table(src)
    meta = json.loads(table.schema.metadata[S.META_KEY])
    meta["format_version"] = 1
    with atomic_path(dst) as tmp:
        pq.write_table(table.drop(["content_key"]).replace_schema_metadata({S.META_KEY: json.dumps(meta).encode()}),
                       tmp)


@FIGURE_SETS.register("stale-index")
class StaleIndex(FigureSet):
    summary = "Mooncake trace on fdp: a stale index restored 60 s and 120 s back, keyed by content under each contract and by object id (v1)"
    needs_mooncake = True
    commands = (
        IMPORT,
        *(_replay("mc.parquet", a, c, f"s{a}-{c}") for a in AGES_S for c in CONTRACTS),
        *(_replay(V1, a, "none", f"v1-s{a}-none") for a in AGES_S),
    )

    def run(self, work: Path) -> None:
        first = type(self)()
        first.commands = (IMPORT,)
        run_commands(first, work)
        as_v1(work / "mc.parquet", work / V1)
        rest = type(self)()
        rest.commands = self.commands[1:]
        run_commands(rest, work)

    def saved_commands(self) -> list[str]:
        cmds = super().saved_commands()
        return [cmds[0], f"(testbed/docfigures/stale_index.py as_v1: {{w}}/mc.parquet -> {{w}}/{V1}, "
                         "content_key dropped, format_version 1)", *cmds[1:]]

    def extract(self, work: Path) -> dict[str, Any]:
        from kvreplay.schema import TraceReader

        def one(out: str) -> dict[str, Any]:
            f = json.loads((work / out / "result.json").read_text())["faults"]
            inj, ct = f["injected"][0], f["contract"]
            return {"index_key": f["index_key"], "state": inj["state"],
                    "outcomes": {o: inj["outcomes"][o]["objects"] for o in OUTCOMES},
                    **{k: inj[k] for k in ("served_wrong_bytes", "stale_entry_loads", "lucky_loads",
                                           "stale_foreign_loads", "recompute_tokens", "recompute_ns")},
                    "phantom_loads": f["phantom_loads"], "detected_valid_loads": ct["detected_valid_loads"],
                    **{k: ct[k] for k in ("extra_bytes_written", "extra_bytes_read", "index_metadata_bytes_peak")}}

        return {"events": TraceReader(work / "mc.parquet").num_rows, "at_s": AT_S,
                "runs": {f"s{a}-{c}": one(f"s{a}-{c}") for a in AGES_S for c in CONTRACTS},
                "v1": {f"s{a}": one(f"v1-s{a}-none") for a in AGES_S}}

    def blocks(self, fig: dict[str, Any]) -> dict[str, str]:
        R, V = fig["runs"], fig["v1"]
        head = (f"Mooncake conversation trace ({fig['events'] / 1e6:.2f}M events, 32 MiB chunks, fdp), the replayed "
                f"SSD's host index restored at {fig['at_s']:,} s from a checkpoint 60 s or 120 s old; loads after it:")
        lines = [fmt.wrap(head), "",
                 "| index age | contract | reused / detected / missing / wrong | served wrong | stale-entry loads: "
                 "foreign / lucky | contract: extra written / read, index peak |",
                 "|---|---|---|---|---|---|"]
        def loads(r: dict[str, Any]) -> str:
            outcomes = " / ".join(f"{r['outcomes'][o]:,}" for o in OUTCOMES)
            return (f"{outcomes} | {fmt.nbytes(r['served_wrong_bytes'])} | {r['stale_entry_loads']:,}: "
                    f"{r['stale_foreign_loads']:,} / {r['lucky_loads']:,}")

        for a in AGES_S:
            for c in CONTRACTS:
                r = R[f"s{a}-{c}"]
                lines.append(f"| {a} s | {c} | {loads(r)} | +{r['extra_bytes_written'] / GiB:,.0f} GiB / "
                             f"+{r['extra_bytes_read'] / GiB:,.0f} GiB, "
                             f"{r['index_metadata_bytes_peak'] / (1 << 20):.2f} MiB |")
            lines.append(f"| {a} s | none, index by object id (v1) | {loads(V[f's{a}'])} | - |")
        table = "\n".join(lines)

        n60, n120 = R["s60-none"], R["s120-none"]
        c60, c120 = R["s60-checksum"], R["s120-checksum"]
        st = n120["state"]
        caught = [c for c in CONTRACTS[1:] if all(R[f"s{a}-{c}"]["outcomes"]["wrong"] == 0 for a in AGES_S)]
        text = (
            f"Keyed by content, the restored index holds {st['stale_entries']:,} entries (120 s back; "
            f"{n60['state']['stale_entries']:,} at 60 s) that a fault-free index holds no longer or for a later "
            f"write, among them chunks evicted since whose content the trace needs again and recomputes under a "
            f"new object id. The store finds the old entry instead ({n120['phantom_loads']:,} of the "
            f"{n120['stale_entry_loads']:,} stale-entry loads at 120 s are such chunks, which it would otherwise "
            f"have computed) and loads the extent it lists, trimmed or rewritten since: under `none` "
            f"{n60['outcomes']['wrong']:,} loads ({fmt.nbytes(n60['served_wrong_bytes'])}) are served wrong with a "
            f"60 s old index and {n120['outcomes']['wrong']:,} ({fmt.nbytes(n120['served_wrong_bytes'])}) with a "
            f"120 s old one (a copy served wrong stays wrong and is loaded again). "
            + ("No stale entry's extent still held its content (no lucky loads). " if all(
                r["lucky_loads"] == 0 for r in R.values()) else "")
            + f"{', '.join(f'`{c}`' for c in caught)} serve none wrong. `checksum` catches the trimmed and partly "
            f"rewritten extents and lets exactly the *foreign* ones through: {c60['outcomes']['wrong']:,} at 60 s "
            f"and {c120['outcomes']['wrong']:,} ({fmt.nbytes(c120['served_wrong_bytes'])}) at 120 s, where the "
            f"freed extent had gone whole to another chunk of the same size ({c60['stale_foreign_loads']:,} and "
            f"{c120['stale_foreign_loads']:,} foreign stale-entry loads in its runs; the header's 33rd unit changes "
            f"which extents are reused, so `none` has {n60['stale_foreign_loads']:,} and "
            f"{n120['stale_foreign_loads']:,}). That chunk's length and CRC are right: only a header naming the "
            f"content (`version`) or the write (`lease`) tells - the checksum's documented limit, not a miss of the "
            f"model. Keyed by object id (the same trace as format v1) the stale entries are never looked up again: "
            f"{V['s60']['outcomes']['wrong']:,} and {V['s120']['outcomes']['wrong']:,} wrong, "
            f"{V['s60']['outcomes']['missing']:,} and {V['s120']['outcomes']['missing']:,} missing. What each "
            f"contract costs is its header's alignment (the table's last column): the same extra bytes with or "
            f"without the fault."
        )
        return {"table": table, "text": fmt.wrap(text)}
