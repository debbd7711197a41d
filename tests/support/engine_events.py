"""The engines' own KV event code, imported from the pinned vLLM and SGLang wheels without torch.

``make test-engines`` installs the wheels of tests/support/engine-requirements.txt with ``--no-deps``. Their
package ``__init__`` modules import torch (and vLLM's config package everything else), so this module puts
bare package objects for the parents in ``sys.modules`` - each with the wheel's directory as ``__path__`` -
and imports the event modules themselves from the wheel, unmodified:

* vLLM: ``vllm.distributed.kv_events`` (``BlockStored``/``BlockRemoved``/``AllBlocksCleared``,
  ``KVEventBatch``, ``EventPublisherFactory``, ``ZmqEventPublisher`` with its replay ROUTER) and
  ``vllm.config.kv_events.KVEventsConfig``; also ``vllm.utils.network_utils`` and ``vllm.envs`` as shipped.
* SGLang: ``sglang.srt.disaggregation.kv_events`` (events, ``StorageMedium``, ``EventPublisherFactory``,
  ``ZmqEventPublisher``) and ``sglang.srt.mem_cache.events.KVCacheEventRecorder``; also
  ``sglang.srt.runtime_context`` and ``sglang.srt.utils.network`` as shipped.

Stubs, each replacing a module that would pull in torch or a native extension, and nothing the events'
content depends on:

* ``vllm.logger``: ``init_logger`` = ``logging.getLogger`` (the real one loads vllm.logging_utils -> torch).
* ``vllm.config.utils``: ``config`` = pydantic's dataclass with ``extra="forbid"``, what the real decorator
  does (its module imports torch at the top).
* ``vllm.v1.core.kv_cache_utils``: ``ExternalBlockHash = bytes | int``, copied from the wheel, and the wheel's
  own ``to_event_extra_keys`` (taken from its source with ``ast``; the drivers publish extra keys through it).
  The real module imports the scheduler, multimodal and torch.
* ``sglang.srt.mem_cache.utils``: ``hash_str_to_int64``, ``compute_node_hash_values`` and
  ``compute_node_event_hash_values`` are the wheel's own function bodies (taken from its source with
  ``ast``); ``get_hash_str``/``get_storage_hash_str`` stand in for the native C++ page hash with a SHA-256
  chain (same shape: one 64-hex-digit string per page). The drivers set each radix node's ``hash_value``, so
  the recorder's hashes are what the driver chose.

``available()`` says whether the wheels are installed (the engine tests are skipped, with the reason, when not).
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import logging
import sys
import types
from pathlib import Path
from typing import Any

VLLM_VERSION = "0.34.0"
SGLANG_VERSION = "0.5.23"


def _root(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def available() -> tuple[bool, str]:
    """(True, "") when the pinned wheels are installed; else (False, why)."""
    for dist, want in (("vllm", VLLM_VERSION), ("sglang", SGLANG_VERSION), ("pydantic", None)):
        have = _version(dist)
        if have is None:
            return False, f"{dist} is not installed (make test-engines)"
        if want and have != want:
            return False, f"{dist} {have} installed, the tests pin {want} (make test-engines)"
    return True, ""


def _package(name: str, root: Path) -> None:
    """A bare package object for ``name`` whose submodules load from ``root/<name as path>``."""
    if name in sys.modules and getattr(sys.modules[name], "__kvbed_bare__", False):
        return
    mod = types.ModuleType(name)
    mod.__path__ = [str(root.joinpath(*name.split(".")[1:]))]
    mod.__kvbed_bare__ = True
    sys.modules[name] = mod
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, mod)


def _stub(name: str, **attrs: Any) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    mod.__kvbed_stub__ = True
    sys.modules[name] = mod
    parent, _, child = name.rpartition(".")
    setattr(sys.modules[parent], child, mod)
    return mod


def _functions_from(path: Path, names: tuple[str, ...], namespace: dict) -> None:
    """Execute the wheel's own definitions of ``names`` (top-level functions of ``path``) in ``namespace``."""
    src = path.read_text()
    tree = ast.parse(src)
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    missing = set(names) - {n.name for n in found}
    if missing:
        raise ImportError(f"{path}: no top-level {', '.join(sorted(missing))} (a new SGLang layout?)")
    code = compile(ast.Module(body=found, type_ignores=[]), str(path), "exec")
    exec(code, namespace)


_cache: dict[str, types.SimpleNamespace] = {}


def vllm() -> types.SimpleNamespace:
    """``.events`` = vllm.distributed.kv_events, ``.config`` = vllm.config.kv_events (from the wheel)."""
    if "vllm" in _cache:
        return _cache["vllm"]
    root = _root("vllm")
    if root is None:
        raise ImportError("vllm is not installed (make test-engines)")
    for name in ("vllm", "vllm.config", "vllm.distributed", "vllm.v1", "vllm.v1.core", "vllm.utils"):
        _package(name, root)
    from pydantic import ConfigDict
    from pydantic.dataclasses import dataclass as pyd_dataclass

    class _Logger(logging.LoggerAdapter):
        def warning_once(self, msg, *args, **kw):
            self.warning(msg, *args, **kw)

        def info_once(self, msg, *args, **kw):
            self.info(msg, *args, **kw)

    _stub("vllm.logger", init_logger=lambda name: _Logger(logging.getLogger(name), {}))

    def config(cls=None, *, config=None, **kwargs):
        merged = ConfigDict(extra="forbid")
        if config is not None:
            merged.update(config)

        def deco(c):
            return pyd_dataclass(c, config=merged, **kwargs)

        return deco if cls is None else deco(cls)

    _stub("vllm.config.utils", config=config)
    from collections.abc import Iterable

    kcu = _stub("vllm.v1.core.kv_cache_utils", ExternalBlockHash=bytes | int, Any=Any, Iterable=Iterable)
    _functions_from(root / "v1" / "core" / "kv_cache_utils.py", ("to_event_extra_keys",), kcu.__dict__)
    ns = types.SimpleNamespace(events=importlib.import_module("vllm.distributed.kv_events"),
                               config=importlib.import_module("vllm.config.kv_events"),
                               to_event_extra_keys=kcu.to_event_extra_keys, version=_version("vllm"))
    _cache["vllm"] = ns
    return ns


def _sha_pages(token_ids, prior_hash=None, page_size=None):
    """Stand-in for SGLang's native page hash: one SHA-256 hex digest per page, chained on the previous."""
    toks = list(token_ids)
    page = page_size or max(len(toks), 1)
    out, prior = [], prior_hash or ""
    for i in range(0, len(toks), page):
        prior = hashlib.sha256((prior + ",".join(map(str, toks[i:i + page]))).encode()).hexdigest()
        out.append(prior)
    return out


def sglang() -> types.SimpleNamespace:
    """``.events`` = sglang.srt.disaggregation.kv_events, ``.recorder`` = sglang.srt.mem_cache.events."""
    if "sglang" in _cache:
        return _cache["sglang"]
    root = _root("sglang")
    if root is None:
        raise ImportError("sglang is not installed (make test-engines)")
    for name in ("sglang", "sglang.srt", "sglang.srt.disaggregation", "sglang.srt.mem_cache",
                 "sglang.srt.utils", "sglang.srt.arg_groups"):
        _package(name, root)
    utils = _stub("sglang.srt.mem_cache.utils", hashlib=hashlib, Any=Any, List=list, Optional=Any,
                  get_hash_str=_sha_pages, get_storage_hash_str=_sha_pages)
    _functions_from(root / "srt" / "mem_cache" / "utils.py",
                    ("hash_str_to_int64", "compute_node_hash_values", "compute_node_event_hash_values"),
                    utils.__dict__)
    ns = types.SimpleNamespace(events=importlib.import_module("sglang.srt.disaggregation.kv_events"),
                               recorder=importlib.import_module("sglang.srt.mem_cache.events"),
                               runtime=importlib.import_module("sglang.srt.runtime_context"),
                               version=_version("sglang"))
    _cache["sglang"] = ns
    return ns
