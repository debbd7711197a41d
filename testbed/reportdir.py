"""Where ``kvbed report`` writes, and which files it will not replace.

A report is a directory: ``report.png`` (the comparison), ``outcomes.png`` (when every run injected faults)
and ``report.json`` (the runs it compares and every figure of its table). By default it is named after its
runs and placed beside the first one (``results/report-none-oracle`` for ``results/none results/oracle``),
so reports of other runs land elsewhere. A directory that already holds report files is written into only
when they are this same report made again (report.json names the same runs, in the same order), or with
``--force``; otherwise the command stops before any work, naming the file it would have replaced.
Everything is drawn into a hidden directory first and moved in at the end, report.json last, so an
interrupted or failed report leaves the directory as it was.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

from kvbed.core.atomicio import check_can_make_dir, json_default, temp_dir_for
from kvbed.core.errors import KvbedError

FILES = ("report.png", "outcomes.png", "report.json")
_MAX_NAME = 80


def default_dir(runs: list[Path]) -> Path:
    """``report-<run>-<run>...`` beside the first run; ``report-<first>-and-<n>-more`` when that is long."""
    names = [p.resolve().name for p in runs]
    name = "report-" + "-".join(names)
    if len(name) > _MAX_NAME:
        name = f"report-{names[0]}-and-{len(names) - 1}-more"
    return runs[0].resolve().parent / name


def _runs_key(runs: list[Path]) -> list[str]:
    return [str(p.resolve()) for p in runs]


def check(out: Path, runs: list[Path], force: bool) -> None:
    """Refuse (KvbedError naming the file) a directory holding another report's files, unless ``force``."""
    try:
        if out.exists() and not out.is_dir():
            raise KvbedError("exists and is not a directory", where=str(out))
        check_can_make_dir(out, str(out))
        present = [out / f for f in FILES if (out / f).exists()]
    except OSError as exc:  # e.g. a name longer than the file system takes
        raise KvbedError(f"cannot write there ({exc.strerror or exc})", where=str(out)) from None
    if not present or force:
        return
    try:
        owner = json.loads((out / "report.json").read_text()).get("runs")
    except (OSError, ValueError, AttributeError):
        owner = None
    if owner == _runs_key(runs):
        return  # this report made again (its runs may have been rerun): replaced, as a run directory is
    of = f" (of {', '.join(owner)})" if isinstance(owner, list) else ""
    raise KvbedError(f"holds another report{of}; choose another -o, or --force to replace it",
                     where=str(present[0]))


def write(out: Path, runs: list[Path], rows: list[dict[str, Any]],
          draw: Callable[[Path], list[str]]) -> list[Path]:
    """Draw (``draw(tmp) -> names of the plots drawn``) and save report.json beside them in a hidden
    directory, then move them into ``out``; a report file of ours that this report does not make (an older
    outcomes.png) is removed, so the directory holds one report."""
    from kvbed.core.version import __version__

    created = not out.exists()
    tmp = temp_dir_for(out / "report")
    try:
        drawn = draw(tmp)
        doc = {"kvbed_version": __version__, "runs": _runs_key(runs), "plots": drawn, "rows": rows}
        (tmp / "report.json").write_text(json.dumps(doc, indent=2, default=json_default) + "\n")
        made = [*drawn, "report.json"]
        for name in FILES:
            if name not in made:
                (out / name).unlink(missing_ok=True)
        for name in made:
            os.replace(tmp / name, out / name)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if created:
            shutil.rmtree(out, ignore_errors=True)  # made for this report, holding nothing else
        raise
    shutil.rmtree(tmp, ignore_errors=True)
    return [out / n for n in made]
