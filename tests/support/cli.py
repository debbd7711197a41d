"""Running ``kvbed`` in-process for the CLI tests, and the checks every bad-input case shares."""

from __future__ import annotations

from click.testing import CliRunner

from testbed.cli import cli


def kvbed(*args, env=None):
    """``kvbed ARGS`` in this process (arguments str()-ed; ``env``: variables set for the call)."""
    return CliRunner().invoke(cli, [str(a) for a in args], env=env)


def ok(res):
    assert res.exit_code == 0, (res.exit_code, res.output, res.stderr)
    return res


def one_line_error(res, *fragments):
    """Exit status 2 and one ``kvbed: error: ...`` line on stderr holding every fragment; no traceback."""
    assert res.exit_code == 2, (res.exit_code, res.output, res.stderr)
    err = res.stderr.strip()
    assert err.startswith("kvbed: error: ") and "\n" not in err, err
    for f in fragments:
        assert f in err, (f, err)
    assert "Traceback" not in res.output + res.stderr


def params(*pairs):
    """``("a=1", "b=2")`` -> ``["--param", "a=1", "--param", "b=2"]``: how every command takes parameters."""
    return [x for p in pairs for x in ("--param", p)]
