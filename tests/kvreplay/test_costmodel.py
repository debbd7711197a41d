"""Load-vs-recompute cost model: the profile table, hand-computed times, the break-even bandwidth."""

from __future__ import annotations

import numpy as np
import pytest

from kvreplay.costmodel import PREFILL_PROFILES, CostParams, PrefillProfile, accelerators
from kvreplay.tiers.geometry import MODELS
from kvbed.core.errors import KvbedError
from kvbed.core.params import with_overrides


def test_table_covers_the_stated_models_on_both_accelerators_with_a_source_each():
    for model in ("llama-3-8b", "llama-3-70b", "qwen2.5-7b", "mistral-7b"):
        for acc in ("a100", "h100"):
            p = PREFILL_PROFILES.get(f"{model}@{acc}")
            assert isinstance(p, PrefillProfile) and p.key == f"{model}@{acc}"
            assert p.prefill_tokens_per_s > 0 and p.decode_step_ns > 0 and len(p.source) > 40
    assert PREFILL_PROFILES.get("llama-3-70b@a100").tp == 4  # 140 GB of weights do not fit one 80 GB GPU
    assert all(PREFILL_PROFILES.get(k).model in MODELS for k in PREFILL_PROFILES)
    assert accelerators() == ["a100", "h100"]
    # an H100 prefills faster than an A100; a 70B model (at TP4) slower than an 8B one
    for m in ("llama-3-8b", "llama-3-70b", "qwen2.5-7b"):
        assert PREFILL_PROFILES.get(f"{m}@h100").prefill_tokens_per_s > PREFILL_PROFILES.get(f"{m}@a100").prefill_tokens_per_s
    assert PREFILL_PROFILES.get("llama-3-70b@a100").prefill_tokens_per_s < 15_056 / 2


def test_llama3_8b_on_a100_is_about_15k_tokens_per_s_and_breaks_even_at_about_2_gb_per_s():
    c = CostParams().validate()
    assert c.bytes_per_token == 131072  # 2 x 32 layers x 8 KV heads x 128 x 2 B
    assert c.tokens_per_s() == 15_056.0
    assert c.step_ns() == 9_760_000
    assert c.breakeven_bytes_per_s() == 131072 * 15_056 == 1_973_420_032


def test_recompute_and_decompress_by_hand_scalar_and_vectorised():
    c = CostParams()
    assert c.recompute_ns(15_056) == 1_000_000_000
    assert c.recompute_ns(1) == 66_419  # ceil(1e9 / 15056) = ceil(66418.70)
    assert c.recompute_ns(0) == 0
    got = c.recompute_ns(np.array([0, 1, 15_056, 30_112], np.int64))
    assert got.dtype == np.int64 and got.tolist() == [0, 66_419, 1_000_000_000, 2_000_000_000]
    assert isinstance(c.recompute_ns(7), int)
    # overrides: 20k tokens/s -> 3 tokens in 150 us; decompress 1 MB at 100 GB/s = 10 us
    o = with_overrides(c, ["prefill_tokens_per_s=20000", "decode_step_ns=5ms"]).validate()
    assert o.recompute_ns(3) == 150_000 and o.step_ns() == 5_000_000
    assert o.breakeven_bytes_per_s() == 131072 * 20000
    assert c.decompress_ns(1_000_000) == 10_000
    assert c.decompress_ns(np.array([1, 1_000_000], np.int64)).tolist() == [1, 10_000]  # ceil of 0.01 ns


def test_dtype_and_model_change_bytes_per_token_and_the_break_even():
    q = CostParams(model="qwen2.5-7b", kv_dtype="fp8").validate()
    assert q.bytes_per_token == 2 * 28 * 4 * 128 * 1
    assert q.breakeven_bytes_per_s() == q.bytes_per_token * 16_104.0
    h = CostParams(model="llama-3-70b", accelerator="h100").validate()
    assert h.bytes_per_token == 2 * 80 * 8 * 128 * 2 and h.tokens_per_s() == 14_448.0


@pytest.mark.parametrize("pairs, match", [
    (["model=gpt-5"], "model: expected one of"),
    (["accelerator=tpu-v5"], "accelerator: expected one of"),
    (["kv_dtype=int4"], "kv_dtype: expected one of"),
    (["prefill_tokens_per_s=-1"], "prefill_tokens_per_s must be >= 0"),
    (["decode_step_ns=-5"], "decode_step_ns must be >= 0"),
    (["decompress_bytes_per_s=0"], "decompress_bytes_per_s must be positive"),
    (["model=llama-3.1-405b"], "no prefill profile for llama-3.1-405b@a100"),
    (["model=llama-3.1-405b", "prefill_tokens_per_s=1000"], "give prefill_tokens_per_s and decode_step_ns"),
])
def test_bad_parameters_are_one_line_errors_naming_the_field(pairs, match):
    with pytest.raises(KvbedError, match=match) as ei:
        with_overrides(CostParams(), pairs).validate()
    assert "\n" not in str(ei.value)


def test_a_model_without_a_profile_works_with_both_figures_given():
    c = CostParams(model="llama-3.1-405b", prefill_tokens_per_s=1000.0, decode_step_ns=80_000_000).validate()
    assert c.recompute_ns(1000) == 1_000_000_000 and c.step_ns() == 80_000_000
    with pytest.raises(KvbedError, match="no prefill profile"):
        CostParams(model="llama-3.1-405b").tokens_per_s()
