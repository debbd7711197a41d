"""``kvbed trace synth``: a deterministic, seeded generator of KV-cache request traces.

It needs no downloaded data and exercises what placement hints can exploit:

* tenants, each with its own system prompt (a prefix shared by all its requests),
  optionally preceded by a platform preamble common to every tenant
  (``shared_prompt_tokens``: prefixes shared across tenants, what a global prefix
  cache reuses and a per-tenant ``cache_salt`` keeps apart), and a workload
  profile, cycling through:
  - ``chat``: multi-turn sessions; each turn's prompt is the whole conversation
    so far (previous outputs included), turns separated by user think time
  - ``rag``: one to three documents from a shared corpus with Zipf popularity,
    then a question, sometimes a follow-up turn
  - ``agent``: agent loops: many quick steps, each prompt = task + every earlier
    (action, tool output) pair; steps separated by tool latency
  - ``batch``: one-shot long documents (summarisation), no reuse beyond the system
    prompt; its SSD copies are stored quantized by the synth defaults
* LoRA adapter tenants (agent, batch) get a new adapter version every
  ``adapter_update_s``: the old scope is invalidated, later prompts use the new one.

Prompts are sequences of segments (system prompt, document, message, tool
output); block ids are chained 64-bit hashes of each ``block_tokens`` slice of
that sequence (one id identifies the whole prefix, as in Mooncake), remapped to
dense integers. Arrival of a session's next request = previous arrival + an
estimate of its prefill and decode time + think/tool time.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
from devicemodels.jit import njit

from kvreplay.requests import RequestTrace
from kvreplay.tiers.chunking import hash_combine
from kvreplay.tiers.sim import TierSimParams
from kvbed.core.errors import KvbedError
from kvbed.core.params import name_value_pairs, nonneg_number, param

PROFILES = ("chat", "rag", "agent", "batch")
GiB = 1 << 30
#: tier defaults of ``kvbed trace synth``: sized to the synthetic workload so that every tier,
#: the SSD included, evicts (the SSD sees several times its capacity in writes); the batch
#: tenant's SSD copies are quantized (transform events, two object kinds); retention differs by
#: tenant as prompt-cache TTLs do (chat 10 min, agent 2 min, batch 1 min, rag documents: none),
#: so SSD lifetimes are not just the LRU eviction age.
SYNTH_TIER_DEFAULTS = TierSimParams(gpu_bytes=8 * GiB, cpu_bytes=32 * GiB, ssd_bytes=128 * GiB,
                                    ssd_kind_tenants="batch=quantized", ttl_tenants="chat=600,agent=120,batch=60")
ADAPTER_PROFILES = ("agent", "batch")


@dataclass(frozen=True)
class SynthParams:
    """Synthetic workload (all lengths in tokens; times in seconds)."""

    seed: int = param(0, "seed of every random draw of the generator")
    duration_s: float = param(1200.0, "sessions start within [0, duration); later requests are cut")
    tenants: int = param(4, "tenants; their profiles cycle chat, rag, agent, batch")
    sessions_per_s: float = param(1.2, "session arrival rate, all tenants together (Poisson)")
    profile_weights: str = param("chat=0.35,rag=0.30,agent=0.20,batch=0.15", "share of sessions per profile")
    block_tokens: int = param(64, "tokens per block id")
    system_prompt_tokens: int = param(1500, "mean system prompt (lognormal, sigma 0.3), one prompt per tenant")
    shared_prompt_tokens: int = param(0, "platform preamble before every tenant's system prompt (a prefix shared "
                                         "across tenants; tenants on another adapter make other KV of it); 0 = none")
    chat_turns: float = param(6.0, "mean turns per chat session (geometric)")
    chat_user_tokens: int = param(200, "chat: tokens of a user turn")
    chat_output_tokens: int = param(300, "chat: tokens of an answer")
    chat_think_s: float = param(25.0, "chat: user think time between turns")
    rag_corpus_docs: int = param(800, "rag: documents in the corpus")
    rag_zipf_alpha: float = param(1.1, "rag: Zipf exponent of document popularity")
    rag_doc_tokens: int = param(2500, "rag: tokens of a document")
    rag_docs_max: int = param(3, "rag: documents per request, uniform in 1..max")
    rag_question_tokens: int = param(80, "rag: tokens of a question")
    rag_output_tokens: int = param(250, "rag: tokens of an answer")
    rag_followup_prob: float = param(0.3, "rag: probability of a follow-up question")
    rag_think_s: float = param(30.0, "rag: think time before a follow-up")
    agent_steps: float = param(12.0, "agent: mean steps per agent loop (geometric)")
    agent_task_tokens: int = param(600, "agent: tokens of the task")
    agent_action_tokens: int = param(120, "agent: tokens of an action")
    agent_tool_tokens: int = param(500, "agent: tokens of a tool result")
    agent_tool_s: float = param(2.0, "agent: tool call time")
    batch_doc_tokens: int = param(6000, "batch: tokens of a document")
    batch_output_tokens: int = param(400, "batch: tokens of an answer")
    adapter_update_s: float = param(400.0, "period of adapter (scope) updates that invalidate KV; 0 = never")
    max_input_tokens: int = param(128_000, "context limit: a session ends before exceeding it")

    def validate(self) -> "SynthParams":
        for name in ("duration_s", "sessions_per_s", "block_tokens", "tenants", "max_input_tokens", "rag_corpus_docs"):
            if not getattr(self, name) > 0:
                raise KvbedError(f"synth {name} must be positive, got {getattr(self, name)}")
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, (int, float)) and not v >= 0:  # seeds, lengths, times, counts, rates
                raise KvbedError(f"synth {f.name} must be >= 0, got {v}")
        if not self.rag_followup_prob <= 1:
            raise KvbedError(f"synth rag_followup_prob must be in [0, 1], got {self.rag_followup_prob}")
        if self.rag_docs_max > self.rag_corpus_docs:
            raise KvbedError(f"synth rag_docs_max ({self.rag_docs_max}) must not exceed rag_corpus_docs "
                             f"({self.rag_corpus_docs}): a request's documents are distinct")
        self.weights()
        return self

    def weights(self) -> dict[str, float]:
        what = "synth profile_weights"
        out = {}
        for k, v in name_value_pairs(self.profile_weights, what, "profile=weight"):
            if k not in PROFILES:
                raise KvbedError(f"{what}: unknown profile {k!r} (choose from: {', '.join(PROFILES)})")
            out[k] = nonneg_number(what, k, v)
        if not out or sum(out.values()) <= 0:
            raise KvbedError("synth profile_weights: at least one profile needs a positive weight")
        return out


def recorded_settings(p: SynthParams) -> dict[str, Any]:
    """The settings a synthetic trace records (``generator.synth``)."""
    return dataclasses.asdict(p)


def tenant_names(n: int) -> list[str]:
    return [PROFILES[i % len(PROFILES)] + ("" if i < len(PROFILES) else str(i // len(PROFILES) + 1)) for i in range(n)]


class _Gen:
    def __init__(self, p: SynthParams, tier: TierSimParams):
        self.p = p
        self.prefill_tokens_per_s = tier.prefill_tokens_per_s
        self.decode_tokens_per_s = tier.decode_tokens_per_s
        self.rng = np.random.default_rng(p.seed)
        self.next_uid = 1
        # requests: (arrival_s, session, turn, tenant, segments [(uid, len)], output)
        self.reqs: list[tuple[float, int, int, int, list[tuple[int, int]], int]] = []

    def uid(self) -> int:
        u = self.next_uid
        self.next_uid += 1
        return u

    def length(self, mean: float) -> int:
        sigma = 0.5
        return max(1, int(self.rng.lognormal(np.log(max(mean, 1)) - sigma * sigma / 2, sigma)))

    def geometric(self, mean: float) -> int:
        return int(self.rng.geometric(1.0 / max(mean, 1.0)))

    def gap(self, segs, out_tokens: int, think_s: float) -> float:
        inp = sum(n for _, n in segs)
        busy = inp / self.prefill_tokens_per_s + out_tokens / self.decode_tokens_per_s
        return busy + float(self.rng.exponential(think_s)) if think_s > 0 else busy


def synthesize(p: SynthParams, tier: TierSimParams = SYNTH_TIER_DEFAULTS) -> RequestTrace:
    """Generate the request trace; ``tier``'s prefill/decode speeds space a session's requests."""
    p.validate()
    g = _Gen(p, tier)
    rng = g.rng
    tenants = tenant_names(p.tenants)
    profile_of = [PROFILES[i % len(PROFILES)] for i in range(p.tenants)]
    w = p.weights()
    # a tenant's weight = its profile's weight shared among tenants of that profile
    per_profile = {pr: profile_of.count(pr) for pr in PROFILES}
    tw = np.array([w.get(pr, 0.0) / per_profile[pr] for pr in profile_of], np.float64)
    if tw.sum() <= 0:
        raise KvbedError("synth: no tenant has a profile with positive weight")
    tw /= tw.sum()
    sys_prompt = [(g.uid(), int(rng.lognormal(np.log(p.system_prompt_tokens) - 0.045, 0.3)) + 1) for _ in tenants]
    corpus_uid = g.next_uid
    g.next_uid += p.rag_corpus_docs
    doc_len = [g.length(p.rag_doc_tokens) for _ in range(p.rag_corpus_docs)]
    ranks = np.arange(1, p.rag_corpus_docs + 1, dtype=np.float64)
    doc_p = ranks ** -p.rag_zipf_alpha
    doc_p /= doc_p.sum()
    doc_perm = rng.permutation(p.rag_corpus_docs)  # popularity rank -> doc id
    preamble = [(g.uid(), p.shared_prompt_tokens)] if p.shared_prompt_tokens > 0 else []

    n_sessions = int(rng.poisson(p.sessions_per_s * p.duration_s))
    starts = np.sort(rng.uniform(0.0, p.duration_s, n_sessions))
    sess_tenant = rng.choice(len(tenants), size=n_sessions, p=tw)
    limit = p.max_input_tokens
    for s in range(n_sessions):
        t = int(sess_tenant[s])
        prof = profile_of[t]
        now = float(starts[s])
        base = preamble + [sys_prompt[t]]
        emit = lambda segs, out, turn: g.reqs.append((now, s, turn, t, list(segs), out))  # noqa: E731

        def ask(hist, msg_tokens, out_tokens, think_s, turn):
            """A user message on top of ``hist`` and the model's answer: emits the request and returns
            the history after the answer, or None if the prompt would exceed the limit."""
            nonlocal now
            msg = (g.uid(), g.length(msg_tokens))
            out = g.length(out_tokens)
            prompt = hist + [msg]
            if sum(n for _, n in prompt) > limit:
                return None
            emit(prompt, out, turn)
            hist = prompt + [(g.uid(), out)]
            now += g.gap(prompt, out, think_s)
            return hist

        if prof == "chat":
            hist = list(base)
            for turn in range(g.geometric(p.chat_turns)):
                hist = ask(hist, p.chat_user_tokens, p.chat_output_tokens, p.chat_think_s, turn)
                if hist is None:
                    break
        elif prof == "rag":
            k = int(rng.integers(1, max(1, p.rag_docs_max) + 1))
            docs = [int(doc_perm[d]) for d in rng.choice(p.rag_corpus_docs, size=k, replace=False, p=doc_p)]
            hist = base + [(corpus_uid + d, doc_len[d]) for d in docs]
            turn = 0
            while True:
                hist = ask(hist, p.rag_question_tokens, p.rag_output_tokens, p.rag_think_s, turn)
                if hist is None:
                    break
                turn += 1
                if rng.random() >= p.rag_followup_prob:
                    break
        elif prof == "agent":
            hist = base + [(g.uid(), g.length(p.agent_task_tokens))]
            for turn in range(g.geometric(p.agent_steps)):
                out = g.length(p.agent_action_tokens)
                if sum(n for _, n in hist) > limit:
                    break
                emit(hist, out, turn)
                hist = hist + [(g.uid(), out), (g.uid(), g.length(p.agent_tool_tokens))]
                now += g.gap(hist, out, p.agent_tool_s)
        else:  # batch
            prompt = base + [(g.uid(), min(g.length(p.batch_doc_tokens), limit // 2))]
            emit(prompt, g.length(p.batch_output_tokens), 0)

    reqs = [r for r in g.reqs if r[0] < p.duration_s]
    order = sorted(range(len(reqs)), key=lambda i: (reqs[i][0], i))
    reqs = [reqs[i] for i in order]
    n = len(reqs)
    if n == 0:
        raise KvbedError("synth: the parameters produce no requests (raise duration_s or sessions_per_s)")

    # scopes: base model for chat/rag, a versioned LoRA adapter per agent/batch tenant
    scopes = ["base"]
    adapter_tenants = [i for i, pr in enumerate(profile_of) if pr in ADAPTER_PROFILES]
    scope_code = {}
    for t in adapter_tenants:
        scope_code[(t, 1)] = len(scopes)
        scopes.append(f"{tenants[t]}-lora@v1")
    updates: list[tuple[float, int]] = []  # (time, tenant)
    if p.adapter_update_s > 0 and adapter_tenants:
        k = 1
        while k * p.adapter_update_s < p.duration_s:
            updates.append((k * p.adapter_update_s, adapter_tenants[(k - 1) % len(adapter_tenants)]))
            k += 1
    version = {t: 1 for t in adapter_tenants}
    inv_ts, inv_scope = [], []
    upd = 0
    arrival = np.empty(n, np.int64)
    scope = np.zeros(n, np.int32)
    for i, r in enumerate(reqs):
        while upd < len(updates) and updates[upd][0] <= r[0]:
            ut, ten = updates[upd]
            inv_ts.append(int(ut * 1e9))
            inv_scope.append(scope_code[(ten, version[ten])])
            version[ten] += 1
            scope_code[(ten, version[ten])] = len(scopes)
            scopes.append(f"{tenants[ten]}-lora@v{version[ten]}")
            upd += 1
        arrival[i] = int(r[0] * 1e9)
        if r[3] in version:
            scope[i] = scope_code[(r[3], version[r[3]])]

    seg_off = np.zeros(n + 1, np.int64)
    np.cumsum([len(r[4]) for r in reqs], out=seg_off[1:])
    seg_uid = np.fromiter((u for r in reqs for u, _ in r[4]), np.int64, int(seg_off[-1]))
    seg_len = np.fromiter((m for r in reqs for _, m in r[4]), np.int64, int(seg_off[-1]))
    inp = np.add.reduceat(seg_len, seg_off[:-1]) if n else np.zeros(0, np.int64)
    blk_off = np.zeros(n + 1, np.int64)
    np.cumsum((inp + p.block_tokens - 1) // p.block_tokens, out=blk_off[1:])
    hashes = _block_hashes(seg_off, seg_uid, seg_len, scope.astype(np.int64), p.block_tokens, blk_off)
    _, ids = np.unique(hashes, return_inverse=True)

    return RequestTrace(
        arrival_ns=arrival,
        input_tokens=inp,
        output_tokens=np.array([r[5] for r in reqs], np.int64),
        block_offsets=blk_off,
        block_ids=ids.astype(np.int64).ravel(),
        block_tokens=p.block_tokens,
        session_id=np.array([r[1] for r in reqs], np.int64),
        turn=np.array([r[2] for r in reqs], np.int32),
        tenant=np.array([r[3] for r in reqs], np.int32),
        scope=scope,
        tenants=tenants,
        scopes=scopes,
        inv_ts_ns=np.array(inv_ts, np.int64),
        inv_scope=np.array(inv_scope, np.int32),
        source={"importer": "synth", "params": dataclasses.asdict(p)},
    )


@njit
def _block_hashes(seg_off, seg_uid, seg_len, scope, B, blk_off):
    """Chained hash of every B-token block of each request's segment sequence."""
    n = seg_off.shape[0] - 1
    out = np.empty(blk_off[n], np.uint64)
    for r in range(n):
        h = hash_combine(np.uint64(0x51ED2701), np.uint64(scope[r]) + np.uint64(1))
        j = blk_off[r]
        fill = 0
        for s in range(seg_off[r], seg_off[r + 1]):
            u = seg_uid[s]
            pos = 0
            while pos < seg_len[s]:
                take = min(seg_len[s] - pos, B - fill)
                h = hash_combine(h, np.uint64(u) * np.uint64(1 << 20) + np.uint64(pos))
                h = hash_combine(h, np.uint64(take))
                pos += take
                fill += take
                if fill == B:
                    out[j] = h
                    j += 1
                    fill = 0
        if fill > 0:
            out[j] = h
            j += 1
    return out


def synth_facts(p: SynthParams, trace: RequestTrace) -> dict[str, Any]:
    f = trace.facts()
    f["tenant_names"] = ",".join(trace.tenants)
    return f
