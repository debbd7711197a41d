"""The docs site builds strictly (a broken link, a missing page or anchor fails), the README is a landing page
whose links resolve, and the README's findings headline is what docs/findings.md says (issue 20)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _studies_docs():
    spec = importlib.util.spec_from_file_location("studies_docs", ROOT / "scripts" / "studies_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_mkdocs_builds_strictly(tmp_path):
    # no --quiet: mkdocs 1.6 then exits 0 on warnings even under --strict
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                          "-d", str(tmp_path / "site")], capture_output=True, text=True,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert res.returncode == 0, res.stderr[-4000:]
    assert "WARNING" not in res.stderr, res.stderr[-4000:]
    assert (tmp_path / "site" / "findings" / "index.html").exists()
    assert (tmp_path / "site" / "reference" / "parameters" / "index.html").exists()


def _nav_pages(nav) -> list[str]:
    out = []
    for item in nav:
        for v in item.values():
            out += _nav_pages(v) if isinstance(v, list) else [v]
    return out


def test_nav_lists_every_page_and_findings_come_before_the_reference():
    # the config's !!python tags (none today) would need mkdocs' loader; a plain YAML file reads as is
    conf = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    pages = _nav_pages(conf["nav"])
    on_disk = sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md"))
    assert sorted(pages) == on_disk
    sections = [next(iter(item)) for item in conf["nav"]]
    assert sections == ["Home", "Getting started", "Findings", "Gallery", "Guides", "Reference", "Development"]


def test_readme_is_a_landing_page_whose_links_resolve():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert len(links) > 20
    for link in links:
        path, _, anchor = link.partition("#")
        if re.match(r"[a-z]+:", path):
            continue
        assert (ROOT / path).exists(), f"README links to {link}, which does not exist"
        if anchor:
            headings = re.findall(r"(?m)^#+ (.+)$", (ROOT / path).read_text())
            slugs = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}
            assert anchor in slugs, f"README links to {link}: no heading for #{anchor}"
    # every guide and reference page is linked from the README
    for page in sorted((ROOT / "docs").glob("*/*.md")):
        if page.parent.name in ("guides", "reference"):
            assert f"(docs/{page.parent.name}/{page.name})" in text, f"the README does not link {page}"


def test_readme_headline_is_what_the_findings_page_says():
    sd = _studies_docs()
    text = README.read_text()
    a = text.index(sd.HEADLINE_BEGIN) + len(sd.HEADLINE_BEGIN) + 1
    b = text.index(sd.HEADLINE_END, a)
    want = sd.headline((ROOT / "docs" / "findings.md").read_text())
    assert want.count("\n") >= 4, want
    assert text[a:b] == want, "README's findings headline is stale: run make studies (scripts/studies_docs.py)"


def test_headline_reads_oracle_and_predicted_per_device():
    sd = _studies_docs()
    md = ("# x\n\n## s1\n\n- On fdp, oracle hints change end-to-end WAF the most against none (-9.0% ...).\n"
          "- fdp, oracle -9.0% on average over 4 setting(s); lowest at ...\n"
          "- fdp, predicted +1.5% on average over 4 setting(s); lowest at ...\n"
          "- On conv, no hint policy changes end-to-end WAF beyond the 95% intervals against none.\n"
          "\n## lab\n\n- On fdp, oracle hints change end-to-end WAF the most against none (-12.0% ...).\n"
          "- fdp, oracle -12.0% on average over 6 setting(s); lowest at ...\n"
          "- fdp, predicted -0.5% on average over 6 setting(s); lowest at ...\n"
          "- fdp: the best practical hint policy, type, captures 31.4% of the oracle's end-to-end WAF cut on "
          "average over 6 setting(s) (share ...).\n"
          "- fdp, the best practical hint policy by trace (share of the oracle's cut, mean over the trace's "
          "settings): mooncake:conversation_trace.jsonl learned 81.9% (2 setting(s)); synth type 35.9% (4 "
          "setting(s)).\n"
          "- fdp, predicted captures 2.0% of the oracle's cut on average over 6 of 6 setting(s) (...).\n"
          "- On fdp, loads served wrong after the faults by contract, summed over ...: none 3.\n")
    assert sd.headline(md).splitlines()[2:] == [
        "| [s1](docs/findings.md#s1) | fdp | -9.0% | +1.5% | - | 4 |",
        "| [s1](docs/findings.md#s1) | conv | within the 95% intervals | within the 95% intervals | - | - |",
        "| [lab](docs/findings.md#lab) | fdp | -12.0% | -0.5% | type 31.4% (mooncake: learned 81.9%; synth: type "
        "35.9%) | 6 |"]  # one row per device


def test_headline_names_each_trace_of_the_best_practical_policy_unambiguously():
    """Trace labels are importer:file or a file name (spaces allowed); the importer alone names a trace only
    where no other trace of the study shares it, and a line that does not parse stops the script."""
    sd = _studies_docs()
    assert sd._per_trace("mooncake:a b.jsonl learned 81.9% (2 setting(s)); my trace.parquet type -3.5% "
                         "(4 setting(s))", "s") == ["mooncake: learned 81.9%", "my trace.parquet: type -3.5%"]
    assert sd._per_trace("mooncake:conversation.jsonl learned 80.0% (1 setting(s)); mooncake:toolagent.jsonl "
                         "type 10.0% (1 setting(s))", "s") == ["mooncake:conversation.jsonl: learned 80.0%",
                                                                "mooncake:toolagent.jsonl: type 10.0%"]
    with pytest.raises(SystemExit, match="cannot read the best practical policy by trace"):
        sd._per_trace("mooncake learned 81.9%", "s")


def test_gallery_shows_the_images_it_has():
    text = (ROOT / "docs" / "gallery.md").read_text()
    shown = set(re.findall(r"!\[[^\]]*\]\((gallery/[^)]+\.png)\)", text))
    on_disk = {f"gallery/{p.name}" for p in (ROOT / "docs" / "gallery").glob("*.png")}
    assert shown == on_disk and shown, "docs/gallery.md and docs/gallery/ differ: run make studies"
