"""The README's commands work on a fresh checkout, in the order it gives them (issue 20).

Convention (stated in the README source too): every ```sh block of README.md holds commands a new user types in
the checkout; this test runs them, in order, in one bash (so ``. .venv/bin/activate`` carries over to the next
command) in a copy of the checkout: its tracked and untracked-not-ignored files (``git ls-files -co
--exclude-standard``), so an uncommitted tree is walked as it would be committed and nothing ignored (.venv,
.cache, results/) comes along: ``make demo`` builds the copy's own virtualenv, as on a fresh machine (pip
installs from its cache). ``make test`` is not run: it is the suite this test is part of.

The copy lives in a temporary directory, so ``../shared`` (beside the project root) is not beside it: the
README's walked commands must not need it (the session on the Mooncake trace is in docs/getting-started.md,
not walked). NUMBA_CACHE_DIR points into the copy, as the Makefile's default does for its own checkout: the
walk compiles its kernels as a fresh machine does, and leaves no cache entries for a deleted directory in the
project's cache (numba keys its cache on the source file's directory)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: what the walk does not run, and why
NOT_RUN = {"make test": "the test suite that runs this walk"}


def readme_commands(text: str) -> list[str]:
    """The commands of every ```sh block, in order: one per line, a trailing backslash joins the next line."""
    cmds: list[str] = []
    for block in re.findall(r"(?ms)^```sh\n(.*?)^```", text):
        pending: list[str] = []
        for line in block.splitlines():
            if line.rstrip().endswith("\\"):
                pending.append(line.rstrip()[:-1].strip())
                continue
            cmd = " ".join([*pending, line.strip()]).strip()
            pending = []
            if cmd and not cmd.startswith("#"):
                cmds.append(cmd)
    return cmds


def _bare(cmd: str) -> str:
    """The command without its trailing comment (for matching NOT_RUN)."""
    return cmd.split(" #", 1)[0].strip()


def copy_checkout(dest: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():  # a tracked file deleted in the working tree is listed too
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def fresh_env(copy: Path) -> dict[str, str]:
    """This machine's environment less what points at this checkout's virtualenv."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "NUMBA_CACHE_DIR")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and not Path(p).resolve().is_relative_to(ROOT))
    env["NUMBA_CACHE_DIR"] = str(copy / ".cache" / "numba")
    return env


def walk(copy: Path, cmds: list[str], logs: Path) -> str:
    """One bash script: each command's output to logs/N.out and its status to logs/N.rc; stop at a failure."""
    lines = ["cd " + str(copy)]
    for i, cmd in enumerate(cmds):
        # the command on its own line, so a trailing comment ends there
        lines += ["{", cmd, f"}} > {logs}/{i}.out 2>&1", f"rc=$?; echo $rc > {logs}/{i}.rc; [ $rc -eq 0 ] || exit $rc"]
    lines += [f"command -v kvbed > {logs}/which.out"]
    return "\n".join(lines) + "\n"


def test_the_readme_gives_the_test_command_ci_runs():
    cmds = [_bare(c) for c in readme_commands((ROOT / "README.md").read_text())]
    assert "make demo" in cmds and "make test" in cmds
    assert cmds.index("make demo") < cmds.index("make test")
    assert (ROOT / ".ci" / "run").read_text().rstrip().endswith("exec make test")


def test_make_test_is_not_walked():
    """Says so in the test report (pytest -ra): the README's ``make test`` is what runs this walk."""
    cmds = [_bare(c) for c in readme_commands((ROOT / "README.md").read_text())]
    assert all(c in cmds for c in NOT_RUN)
    pytest.skip("; ".join(f"the README walk does not run `{c}`: it is {why}" for c, why in NOT_RUN.items()))


def test_readme_commands_in_order_are_what_the_walk_parses():
    text = "x\n```sh\nmake demo   # a comment\nkvbed a \\\n  b\n```\n```\nnot run\n```\n```sh\n. x\n```\n"
    assert readme_commands(text) == ["make demo   # a comment", "kvbed a b", ". x"]


@pytest.mark.slow
def test_the_readme_walk_works_in_a_clean_copy(tmp_path):
    """Every command exits 0 (``make test`` skipped, see NOT_RUN); the demo's comparison shows oracle hints below
    no hints in WAF; after ``. .venv/bin/activate`` ``kvbed`` is the copy's, and its commands read the demo's
    trace."""
    copy, logs = tmp_path / "kvbed", tmp_path / "logs"
    copy.mkdir()
    logs.mkdir()
    copy_checkout(copy)
    cmds = [c for c in readme_commands((copy / "README.md").read_text()) if _bare(c) not in NOT_RUN]
    assert _bare(cmds[0]) == "make demo"
    t0 = time.monotonic()
    try:
        res = subprocess.run(["bash", "-c", walk(copy, cmds, logs)], env=fresh_env(copy), stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=1800)
        took = time.monotonic() - t0
        _check(copy, cmds, logs, res, took)
    finally:  # the copy's virtualenv is 1.2 GB, and pytest keeps the last three temporary directories
        shutil.rmtree(copy, ignore_errors=True)


def _check(copy: Path, cmds: list[str], logs: Path, res: subprocess.CompletedProcess, took: float) -> None:
    import pyarrow.parquet as pq

    outs = []
    for i, cmd in enumerate(cmds):
        rc_file = logs / f"{i}.rc"
        assert rc_file.exists(), f"the walk stopped before `{cmd}` ({res.returncode}: {res.stderr[-2000:]})"
        out = (logs / f"{i}.out").read_text()
        assert rc_file.read_text().strip() == "0", f"`{cmd}` failed in the copy:\n{out[-3000:]}"
        outs.append(out)
    print(f"README walk: {len(cmds)} commands in {took:.0f} s (not run: {', '.join(NOT_RUN)})")

    # the comparison table (after the table of what differs between the runs): WAF by run
    demo = outs[0].splitlines()
    start = next(i for i, line in enumerate(demo) if "kvbed runs: end-to-end WAF" in line)
    header = next(line for line in demo[start:] if line.lstrip().startswith("┃ run"))
    col = [c.strip() for c in header.split("┃")].index("WAF")
    waf = {}
    for run in ("none", "oracle"):
        row = next(line for line in demo[start:] if re.match(rf"\s*│ {run}\s+│", line))
        waf[run] = float(row.split("│")[col])
    assert 1.0 <= waf["oracle"] < waf["none"], waf
    assert (copy / "results/demo/none/result.json").exists() and (copy / "results/demo/oracle/result.json").exists()

    assert Path((logs / "which.out").read_text().strip()) == copy / ".venv" / "bin" / "kvbed"
    stats = outs[cmds.index(next(c for c in cmds if c.startswith("kvbed trace stats")))]
    rows = pq.read_metadata(copy / "results/demo/sample.parquet").num_rows
    assert f"{rows:,} in" in stats, stats[:500]
