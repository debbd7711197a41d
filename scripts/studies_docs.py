#!/usr/bin/env python3
"""Write the findings and the gallery of the docs from finished example studies (``make studies``).

From each study directory given (results/studies/<name>), everything comes from the saved study files:

- docs/findings.md: per study its findings (testbed.study.findings), its end-to-end WAF by hint
  policy with 95% intervals and, in a hint-lab study, the share of the oracle's WAF cut per policy;
- the README's headline (between ``<!-- findings:headline -->`` and ``<!-- findings:end -->``): the oracle's
  and predicted hints' WAF change per device of each study and the best practical policy's share of the
  oracle's cut, as docs/findings.md states them (``headline()``; a test keeps them in step);
- docs/gallery.md and docs/gallery/<study>-<plot>.png: the study's plots, copied from its plots/ directory.

    python scripts/studies_docs.py results/studies/kv-hints-fdp results/studies/...
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FINDINGS_INTRO = """# What kvbed finds

The example studies (`studies/*.toml`) on this repository's traces (the Mooncake conversation trace and the
synthetic multi-tenant trace), as `make studies` last wrote them: this page is generated from each study's
table by `scripts/studies_docs.py` (do not edit by hand). A policy's change counts as real only beyond both
95% intervals. Where a policy and none each gave one value in every seed (a policy the seed does not change, on
an imported trace), that is one sample, not an interval: such a setting is said not to vary with the seed and is
not counted as beyond the intervals. How a study is specified and run: [Studies](guides/studies.md); their plots:
[Gallery](gallery.md).
"""

#: after the studies: what the trace itself says about eviction (figures from a saved figure set, rendered here)
FINDINGS_HEADROOM = """## Headroom of the tiers' eviction policies

How far each tier's eviction policy is from the best possible on the same accesses (Belady's MIN on the tier's
content keys, `kvbed trace stats`): where the gap is large, better eviction is worth pursuing; where Belady
reaches the unbounded ratio, capacity is not what limits the tier. On the Mooncake conversation trace with the
default tiers (the saved `mooncake-content` figures, `python scripts/doc_figures.py run mooncake-content`):

<!-- figures:mooncake-content/table -->
<!-- /figures -->

<!-- figures:mooncake-content/text -->
<!-- /figures -->
"""

GALLERY_INTRO = """# Gallery

The plots of the example studies (`studies/*.toml`), as `make studies` last drew them (copied from each
study's `plots/` by `scripts/studies_docs.py`; do not edit by hand). What they find: [Findings](findings.md).
"""

#: what each study plot shows (file name without the study prefix -> caption)
CAPTIONS = {
    "waf_by_hints": "end-to-end WAF by hint policy: change vs none (%), per setting",
    "gc_stall_by_hints": "foreground GC stall (sum over stalls) by hint policy, per setting",
    "per_ruh_bytes": "bytes written per reclaim unit handle",
    "loads_by_contract": "loads served wrong after the faults (all, and through a stale index entry) by contract",
    "oracle_share_by_hints": "share of the oracle's end-to-end WAF cut each hint policy captures, per setting",
}
#: a fault study's table in the findings (the rest of its metrics are in its report)
FAULT_COLUMNS = ("loads_wrong", "stale_entry_loads", "stale_wrong_loads", "loads_detected", "loads_missing",
                 "recompute_tokens", "contract_extra_bytes_written")
HEADLINE_BEGIN, HEADLINE_END = "<!-- findings:headline -->", "<!-- findings:end -->"


def section(study_dir: Path) -> str:
    import pandas as pd

    from testbed.study import table
    from testbed.study.labreport import FORMULA, share_table
    from testbed.study.aggregate import setting_cols
    from testbed.study.findings import findings
    from testbed.study.report import interval_note, md_table, pivot_markdown
    from testbed.study.table import dimensions

    doc = json.loads((study_dir / "study.json").read_text())
    df = table.load(study_dir)
    summary = pd.read_csv(study_dir / "summary.csv")
    counts = df["status"].value_counts().to_dict()
    out = [f"## {doc['name']}", "", doc["description"], "",
           f"`studies/{doc['name']}.toml`: {len(df)} points "
           f"({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))}), seeds {doc['seeds']}.", ""]
    out += [f"- {s}" for s in findings(df, doc)] + [""]
    piv = pivot_markdown(summary, doc)
    if piv:
        out += [f"<details markdown=\"1\"><summary>end-to-end WAF by hint policy ({interval_note(summary)})</summary>", "",
                piv, "", "</details>", ""]
    shares = share_table(df, setting_cols(doc))
    if shares:  # a hint-lab study: the share of the oracle's WAF cut per policy
        out += [f"<details markdown=\"1\"><summary>share of the oracle's WAF cut captured, {FORMULA} (per setting "
                "the mean over seeds; the worst WAF change against the grid's none points)</summary>", "",
                shares, "", "</details>", ""]
    if "loads_wrong" in doc["metrics"]:  # a fault study: its outcome counts per setting and contract
        keys = [c for c in dimensions(doc)[0] if c in summary.columns]
        metrics = [m for m in doc["metrics"] if m in FAULT_COLUMNS]
        out += [f"<details markdown=\"1\"><summary>loads after the faults by contract ({interval_note(summary)})"
                "</summary>", "", md_table(summary, keys, metrics), "", "</details>", ""]
    return "\n".join(out)


def headline(findings_md: str) -> str:
    """The README's headline, a table read off docs/findings.md: per study and device, the average change of
    end-to-end WAF against no hints under oracle hints (the future known) and predicted hints (the past only),
    and, in a hint-lab study, the best practical policy's share of the oracle's WAF cut, then per trace the best
    one there and its share."""
    rows = ["| study | device | oracle | predicted | best practical: share of the oracle's cut | settings |",
            "|---|---|---|---|---|---|"]
    for block in re.split(r"(?m)^## ", findings_md)[1:]:
        name = block.splitlines()[0].strip()
        for dev in dict.fromkeys(re.findall(r"(?m)^- On (\S+), ", block)):
            got = {pol: (chg, n) for pol, chg, n in re.findall(
                rf"(?m)^- {re.escape(dev)}, (oracle|predicted) ([+-][\d.]+%) on average over (\d+) setting", block)}
            if not got and not re.search(rf"(?m)^- On {re.escape(dev)}, (no hint policy|\S+ hints change)", block):
                continue  # a finding that is not about hint policies (a fault study's)
            n = next((v[1] for v in got.values()), "-")
            cells = [got[p][0] if p in got else "within the 95% intervals" for p in ("oracle", "predicted")]
            best = re.search(rf"(?m)^- {re.escape(dev)}: the best practical hint policy, (\S+), captures "
                             r"(-?[\d.]+%) of the oracle's end-to-end WAF cut", block)
            share = f"{best[1]} {best[2]}" if best else "-"
            by_trace = re.search(rf"(?m)^- {re.escape(dev)}, the best practical hint policy by trace \([^)]*\): "
                                 r"(.+?)\.?$", block)
            if best and by_trace:  # the mean over traces hides that the best policy and its share depend on it
                share += f" ({'; '.join(_per_trace(by_trace[1], name))})"
            rows.append(f"| [{name}](docs/findings.md#{name}) | {dev} | {cells[0]} | {cells[1]} | {share} | {n} |")
    return "\n".join(rows) + "\n"


def _per_trace(text: str, study: str) -> list[str]:
    """``"trace: policy share"`` per entry of a findings "by trace" list (testbed.study.labreport: entries
    ``TRACE POLICY SHARE (N setting(s))`` joined by "; "); a trace is named by its importer alone
    (``mooncake:conversation_trace.jsonl`` -> ``mooncake``) where that stays unique."""
    entries = []
    for part in text.split("; "):
        m = re.fullmatch(r"(.+) (\S+) (-?[\d.]+%|nan%) \(\d+ setting\(s\)\)", part)
        if m is None:
            raise SystemExit(f"docs/findings.md, {study}: cannot read the best practical policy by trace: {part!r}")
        entries.append(m.groups())
    short = [t.split(":")[0] for t, _, _ in entries]
    names = short if len(set(short)) == len(short) else [t for t, _, _ in entries]
    return [f"{n}: {pol} {pct}" for n, (_, pol, pct) in zip(names, entries)]


def gallery(study_dirs: list[Path]) -> str:
    """Copy each study's plots into docs/gallery/ (replacing what was there) and return docs/gallery.md."""
    dest = ROOT / "docs" / "gallery"
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    out = [GALLERY_INTRO]
    for d in study_dirs:
        name = json.loads((d / "study.json").read_text())["name"]
        out += [f"## {name}", "", f"`studies/{name}.toml`, findings: [{name}](findings.md#{name}).", ""]
        for png in sorted((d / "plots").glob("*.png")):
            shutil.copyfile(png, dest / f"{name}-{png.name}")
            caption = CAPTIONS.get(png.stem) or png.stem.replace("_", " ").replace("waf vs ", "end-to-end WAF vs ")
            out += [f"![{name}: {caption}](gallery/{name}-{png.name})", "", f"*{caption}*", ""]
    return "\n".join(out)


def replace_between(text: str, begin: str, end: str, body: str) -> str:
    a = text.index(begin) + len(begin)
    return text[:a] + "\n" + body + text[text.index(end, a):]


def main() -> None:
    dirs = [Path(d) for d in sys.argv[1:]]
    from testbed.docfigures.base import render_text

    findings_md = render_text(FINDINGS_INTRO + "\n" + "\n".join(section(d) for d in dirs) + "\n" + FINDINGS_HEADROOM,
                              "docs/findings.md")
    (ROOT / "docs" / "findings.md").write_text(findings_md)
    (ROOT / "docs" / "gallery.md").write_text(gallery(dirs))
    readme = ROOT / "README.md"
    readme.write_text(replace_between(readme.read_text(), HEADLINE_BEGIN, HEADLINE_END, headline(findings_md)))


if __name__ == "__main__":
    main()
