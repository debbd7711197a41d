"""Request-level sources to lifecycle trace files: an importer's requests, or the synthetic workload, run
through the tier simulator. ``kvbed trace import|synth`` and studies both make their traces here, so a
study's trace is byte for byte the one the command would write."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from kvreplay.schema import TraceMeta
from kvreplay.tiers.sim import TierSimParams, TierSimResult, simulate_to_file


def import_trace(fmt: str, src: str | Path, tier: TierSimParams, out: str | Path, *,
                 progress: Callable[[int, int], None] | None = None,
                 drop_inconsistent: bool = False) -> tuple[TierSimResult, TraceMeta]:
    """Read a request trace with importer ``fmt`` and tier-simulate it into ``out`` (written atomically).
    ``drop_inconsistent``: drop the source lines whose block list does not match their input length (counted
    in the source facts) instead of refusing the file."""
    from kvreplay.importers import IMPORTERS

    reqs = IMPORTERS.get(fmt)(drop_inconsistent=drop_inconsistent).read_requests(src)
    generator = {"importer": fmt, **({"drop_inconsistent": True} if drop_inconsistent else {})}
    meta = TraceMeta(source=reqs.source, source_facts=reqs.facts(), generator=generator)
    return simulate_to_file(reqs, tier, out, meta, progress=progress), meta


def synth_trace(sp: Any, tier: TierSimParams, out: str | Path, *,
                progress: Callable[[int, int], None] | None = None) -> tuple[TierSimResult, TraceMeta]:
    """Generate the synthetic workload ``sp`` (SynthParams) and tier-simulate it into ``out``."""
    from kvreplay.synth import recorded_settings, synth_facts, synthesize

    reqs = synthesize(sp, tier)
    meta = TraceMeta(source={"importer": "synth"}, source_facts=synth_facts(sp, reqs),
                     generator={"synth": recorded_settings(sp)})
    return simulate_to_file(reqs, tier, out, meta, progress=progress), meta
