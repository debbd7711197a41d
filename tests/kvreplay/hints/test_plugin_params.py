"""``--param`` keys of a hint policy: a key it shares with another parameter set (a plugin's ``page_bytes`` or
``seed``) is refused unqualified, naming both sets and the qualified keys, instead of silently reaching one set
and leaving the other at its default; qualified, each goes where it says. The hint set is ``hint`` or ``hints``
in --param and in ``kvbed params`` alike (one alias table), and built-in policies route as before."""

from __future__ import annotations

import sys
import textwrap

import pytest

from kvbed.core.errors import KvbedError
from kvbed.core.params import GROUP_ALIASES, split_overrides
from kvreplay.hints import HINTS
from kvreplay.replay.engine import build_config
from tests.support.cli import kvbed, ok, one_line_error

SHARED = textwrap.dedent('''
    from dataclasses import dataclass

    import numpy as np

    from kvbed.core.params import param
    from kvreplay.hints import HintPolicy


    @dataclass(frozen=True)
    class SharedParams:
        page_bytes: int = param(1 << 20, "a page size of the policy's own")
        seed: int = param(7, "the policy's own seed")
        step: int = param(2, "a key no other set has")


    class Shared(HintPolicy):
        knows = "nothing"
        Params = SharedParams

        def _assign(self, batch, actions, writes):
            return np.zeros(len(writes), np.int16)
''')


@pytest.fixture
def shared(tmp_path):
    path = tmp_path / "shared_hints.py"
    path.write_text(SHARED)
    yield f"{path}:Shared"
    HINTS.forget_plugins()
    for m in [m for m in sys.modules if "shared_hints" in m]:
        del sys.modules[m]


def _cfg(hints, *pairs):
    return build_config("t.parquet", "fdp", hints, list(pairs))


@pytest.mark.parametrize("pair, sets", [
    ("page_bytes=8MiB", ["(hint.page_bytes)", "device fdp (flash.page_bytes)", "hint.page_bytes=8MiB or "
                                                                                "flash.page_bytes=8MiB"]),
    ("seed=1", ["replay (replay.seed)", "(hint.seed)", "device fdp (flash.seed)"]),
])
def test_a_key_a_plugin_shares_is_refused_unqualified(shared, pair, sets):
    with pytest.raises(KvbedError, match="is a key of more than one parameter set") as e:
        _cfg(shared, pair)
    for s in sets:
        assert s in str(e.value), str(e.value)


def test_qualified_keys_go_where_they_say(shared):
    cfg = _cfg(shared, "flash.page_bytes=8MiB", "hint.page_bytes=2MiB", "hints.seed=3", "replay.seed=1", "step=5")
    assert cfg.device_params["flash"].page_bytes == 8 << 20
    assert (cfg.hint_params.page_bytes, cfg.hint_params.seed, cfg.hint_params.step) == (2 << 20, 3, 5)
    assert cfg.replay.seed == 1 and cfg.device_params["flash"].seed == 1
    cfg = _cfg(shared, "hint.page_bytes=4MiB")
    assert cfg.hint_params.page_bytes == 4 << 20 and "page_bytes" not in cfg.explicit  # the device sizes its own


def test_the_cli_refuses_in_one_line(shared, tmp_path):
    out = tmp_path / "out"
    one_line_error(kvbed("replay", tmp_path / "t.parquet", "--hints", shared, "--param", "page_bytes=8MiB",
                         "-o", out), "'page_bytes' is a key of more than one parameter set", "flash.page_bytes")
    assert not out.exists()


def test_built_in_policies_route_as_before():
    cfg = _cfg("hotness", "window=3", "seed=5", "page_bytes=2MiB")
    assert cfg.hint_params.window == 3 and cfg.replay.seed == 5 and cfg.device_params["flash"].seed == 5
    assert cfg.device_params["flash"].page_bytes == 2 << 20
    assert _cfg("hotness", "hints.window=4").hint_params.window == 4
    assert _cfg("hotness", "hint.window=4").hint_params.window == 4


def test_hint_and_hints_name_one_group_in_both_places():
    assert GROUP_ALIASES == {"hints": "hint"}
    from dataclasses import make_dataclass

    P = make_dataclass("P", [("a", int, 0)], frozen=True)
    assert split_overrides(["hints.a=1"], {"replay": P, "hint": P}) == {"replay": [], "hint": ["a=1"]}
    with pytest.raises(KvbedError, match=r"unknown parameter group 'hintz' .*\(groups: replay, hint; hints = hint\)"):
        split_overrides(["hintz.a=1"], {"replay": P, "hint": P})
    for key in ("hint.window", "hints.window", "hints.hotness.window", "hint.hotness.window", "hotness.window"):
        res = ok(kvbed("params", key))
        assert res.output.startswith("window  (set hints.hotness: kvbed replay --hints hotness; --param KEY, hint.KEY"), (key, res.output)
    for name in ("hint.hotness", "hints.hotness"):
        assert "hints.hotness: kvbed replay --hints hotness" in ok(kvbed("params", name)).output
    one_line_error(kvbed("params", "hint.no_such_key"), "unknown parameter set or key 'hint.no_such_key'")
