"""Re-chunk source prefix blocks into storage objects of ``tokens_per_object`` tokens.

A storage object (an LMCache-style chunk) covers tokens [c*T, (c+1)*T) of a
request's prompt; the last one may be shorter. Its key must identify the whole
token prefix up to its end, so it is a chained 64-bit hash of the previous
chunk's key, the ids of the source blocks it overlaps, where it starts inside
the first block and how many tokens it holds (plus the scope, because another
model or adapter version makes different KV from the same tokens). This is
right whether or not the source ids are themselves chained, and works for
objects smaller than a source block (Mooncake: 512-token ids) or larger
(Alibaba: 16-token ids). Tokens beyond the last block id are not cacheable.

A request's salt (its sharing domain, :mod:`kvreplay.tiers.sharing`; 0 = none) is hashed in
after the scope, as vLLM hashes ``cache_salt`` into a prompt's first block: equal token
prefixes of two domains get different keys.
"""

from __future__ import annotations

import numpy as np
from devicemodels.jit import njit

_C1 = np.uint64(0xFF51AFD7ED558CCD)
_C2 = np.uint64(0xC4CEB9FE1A85EC53)
_GOLD = np.uint64(0x9E3779B97F4A7C15)


@njit(inline="always")
def _fmix(k):
    k ^= k >> np.uint64(33)
    k *= _C1
    k ^= k >> np.uint64(33)
    k *= _C2
    k ^= k >> np.uint64(33)
    return k


@njit(inline="always")
def hash_combine(h, v):
    return _fmix(h ^ (np.uint64(v) + _GOLD + (h << np.uint64(6)) + (h >> np.uint64(2))))


@njit
def _count_chunks(block_offsets, input_tokens, B, T):
    n = input_tokens.shape[0]
    off = np.zeros(n + 1, np.int64)
    for r in range(n):
        nb = block_offsets[r + 1] - block_offsets[r]
        covered = min(input_tokens[r], nb * B)
        off[r + 1] = off[r] + (covered + T - 1) // T
    return off


@njit
def _chunk_hashes(block_offsets, block_ids, input_tokens, scope, salt, B, T, off):
    n = input_tokens.shape[0]
    m = off[n]
    hashes = np.empty(m, np.uint64)
    ntok = np.empty(m, np.int32)
    for r in range(n):
        b0 = block_offsets[r]
        nb = block_offsets[r + 1] - b0
        covered = min(input_tokens[r], nb * B)
        h = hash_combine(_GOLD, np.uint64(scope[r]) + np.uint64(1))
        if salt[r] != 0:
            h = hash_combine(h, salt[r])
        j = off[r]
        a = 0
        while a < covered:
            b = min(a + T, covered)
            for blk in range(a // B, (b - 1) // B + 1):
                h = hash_combine(h, np.uint64(block_ids[b0 + blk]))
            h = hash_combine(h, np.uint64(a % B) * np.uint64(1 << 32) + np.uint64(b - a))
            hashes[j] = h
            ntok[j] = b - a
            j += 1
            a = b
    return hashes, ntok


def chunk_requests(block_offsets, block_ids, input_tokens, scope, block_tokens: int, tokens_per_object: int,
                   salt=None):
    """Return (chunk_offsets[n+1], key index per chunk, tokens per chunk, tokens per key, scope per key).
    ``salt``: uint64 per request (its sharing domain; None or 0 = no salt)."""
    return chunk_table(block_offsets, block_ids, input_tokens, scope, block_tokens, tokens_per_object, salt)[:5]


def chunk_table(block_offsets, block_ids, input_tokens, scope, block_tokens: int, tokens_per_object: int,
                salt=None):
    """:func:`chunk_requests` and, sixth, each key's chained hash (uint64[K], increasing): the chunk's content
    key in the trace (format v2), the prefix-chain hash within its scope and sharing domain."""
    off = _count_chunks(block_offsets, input_tokens, int(block_tokens), int(tokens_per_object))
    if salt is None:
        salt = np.zeros(len(input_tokens), np.uint64)
    hashes, ntok = _chunk_hashes(block_offsets, block_ids, input_tokens, scope, np.ascontiguousarray(salt, np.uint64),
                                 int(block_tokens), int(tokens_per_object), off)
    uniq, first, inv = np.unique(hashes, return_index=True, return_inverse=True)
    key_ntok = ntok[first].astype(np.int64)
    req_of_chunk = np.repeat(np.arange(len(input_tokens)), np.diff(off))
    key_scope = scope[req_of_chunk[first]].astype(np.int64) if len(first) else np.zeros(0, np.int64)
    return off, inv.astype(np.int64).ravel(), ntok, key_ntok, key_scope, uniq.astype(np.uint64)
