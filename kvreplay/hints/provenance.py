"""A plugin policy's code, recorded with its run: the file defining the class and its sha256 (config.json's
``hint_source``, result.json's ``hint_policy.source``), so a rerun from config.json refuses other code.

Apart from :mod:`kvreplay.hints.plugins` because it asks the registry which names are kvbed's own, and the
registry is built on the plugins module (no module pair imports each other).
"""

from __future__ import annotations

import hashlib
import inspect
from pathlib import Path

from kvbed.core.errors import KvbedError
from kvreplay.hints.registry import HINTS


def plugin_source(name: str, policy_cls: type) -> dict[str, str] | None:
    """Where a plugin policy's code is and its sha256, for config.json and result.json: ``{"file": the absolute
    path of the source file that defines the class (the module's file for ``module:Class`` and entry points),
    "sha256": "sha256:..."}``; None for a policy of kvbed's own (its version says which code ran)."""
    if HINTS.is_registered(name):
        return None
    try:
        path = Path(inspect.getfile(policy_cls)).resolve()
    except TypeError:  # a class without a file (made at run time): nothing to hash
        raise KvbedError(f"hint policy {name!r}: {policy_cls.__name__} has no source file; a run must record "
                         f"the code of its policy, so define it in a module or file") from None
    return {"file": str(path), "sha256": _sha256(path)}


def _sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def check_plugin_source(name: str, recorded: dict[str, str], policy_cls: type, *, where: str) -> None:
    """Refuse (one line) to rerun a plugin policy whose code is not the code the run recorded."""
    now = plugin_source(name, policy_cls)
    try:
        file, sha = recorded["file"], recorded["sha256"]
    except (KeyError, TypeError):
        raise KvbedError(f"hint_source: expected {{file, sha256}}, got {recorded!r}", where=where) from None
    if now is None:
        raise KvbedError(f"hint_source: {name!r} is a policy of kvbed's own now, not the plugin the run used "
                         f"({file})", where=where)
    if now["file"] != file:
        raise KvbedError(f"hint policy {name!r} now loads from {now['file']}, not from {file} as in the run: "
                         f"the code may differ, rerun without --config", where=where)
    if now["sha256"] != sha:
        raise KvbedError(f"hint policy {name!r}: its code changed since the run: {file} has {now['sha256'][:19]}..., "
                         f"the run recorded {sha[:19]}...; restore that file or rerun without --config", where=where)
