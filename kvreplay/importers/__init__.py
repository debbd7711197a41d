"""Trace importers (registry ``IMPORTERS``): one module per source format.

Request-level formats (``level = "request"``) are run through the tier simulator
by ``kvbed trace import``; engine KV event streams (vLLM, SGLang) will register
``level = "event"`` importers that yield lifecycle batches directly.
"""

from kvreplay.importers.base import IMPORTERS, Importer
from kvreplay.importers import alibaba, mooncake, sglang_events, vllm_events  # noqa: F401  (registration)

__all__ = ["IMPORTERS", "Importer"]
