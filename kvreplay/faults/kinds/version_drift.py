"""``version-drift``: an adapter or model update whose invalidation is missed - the scope's version moves on,
every existing copy (any tier) keeps the old version and stays indexed; KV computed after it has the new one."""

from __future__ import annotations

from dataclasses import dataclass

from kvreplay.faults.base import Fault, FaultTime
from kvreplay.faults.registry import FAULTS
from kvbed.core.params import param


@FAULTS.register("version-drift")
class VersionDrift(Fault):
    @dataclass(frozen=True)
    class Params(FaultTime):
        scope: str = param("", "the scope (model/adapter) updated; empty = every scope")

    def check_trace(self, facts) -> None:
        if self.p.scope and self.p.scope not in facts.scopes:
            raise self.error(f"scope={self.p.scope}: the trace has no such scope (scopes: "
                             f"{', '.join(facts.scopes[:10])}{', ...' if len(facts.scopes) > 10 else ''})")

    def apply(self, state) -> dict:
        names = state.scope_names
        codes = None if not self.p.scope else [names.index(self.p.scope)] if self.p.scope in names else []
        scope_ver = state.ver.scope_ver  # changed in place: the kernel's state holds this array
        if codes is None:
            scope_ver += 1
        else:
            scope_ver[codes] += 1
        return {"scopes_updated": len(scope_ver) if codes is None else len(codes)}
