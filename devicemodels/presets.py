"""Parameter presets: ``--param preset=NAME`` sets a named group of device parameters at once.

Why presets: matching another simulator takes several knobs that only make sense together (FEMU's
GC trigger, its threshold semantics, its victim deferral, its eager reclaim units); a preset names
that group so a run says ``preset=femu`` instead of repeating it, and the saved config still lists
every resulting value. Explicit ``k=v`` values given with a preset win over the preset's
(:func:`kvbed.core.params.expand_presets` puts the preset's pairs first). A preset is not a
default: without one the model keeps its own behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from devicemodels.base import PRESETS


@dataclass(frozen=True)
class Preset:
    summary: str
    values: dict[str, Any] = field(default_factory=dict)
    #: where each value comes from (shown by ``kvbed params --presets``)
    sources: dict[str, str] = field(default_factory=dict)


PRESETS.register("none")(Preset("the model's own defaults"))

# FEMU 99ce4fb (MoatLab/FEMU, hw/femu/bbssd): the FDP FTL of ftl-fdp.c with the FTL loop of ftl.c.
PRESETS.register("femu")(Preset(
    "FEMU's black-box FDP SSD (hw/femu/bbssd, commit 99ce4fb): its GC trigger, thresholds, victim "
    "deferral, GC destinations and eager reclaim units",
    values={
        "gc_bg_trigger": "per-command",
        "gc_bg_min_invalid_ratio": 0.125,
        "gc_bg_used_pct": 75,
        "gc_fg_used_pct": 95,
        "gc_policy": "greedy",
        "gc_copy_order": "block",
        "ru_open_at_start": True,
        "ii_gc_dest": "last-ruh",
    },
    sources={
        "gc_bg_trigger": "ftl.c:275-288: after every request, one do_gc_fdp_style(force=false) pass if "
                         "should_gc_fdp_style()",
        "gc_bg_min_invalid_ratio": "ftl-fdp.c:677-710: a non-forced pass puts back a victim with "
                                   "ipc < npages/8",
        "gc_bg_used_pct": "femu.c:1422 gc_thres_pcent default 75; ftl-fdp.c:1414 gc_thres_rus = "
                          "(uint64_t)((1 - pct) * tt_nru); ftl-internal.h:166 free <= gc_thres_rus",
        "gc_fg_used_pct": "femu.c:1423 gc_thres_pcent_high default 95; ftl-fdp.c:1187 forced GC while "
                          "free <= gc_thres_rus_high before a write",
        "gc_policy": "ftl-fdp.c:1309 GC_GLOBAL_GREEDY (min vpc over the reclaim group's victim queue)",
        "gc_copy_order": "ftl-fdp.c:991-1001, 808-823: a victim is cleaned block by block (for ch, for lun, "
                         "for pg) while the write pointer stripes page by page (ftl-fdp.c:218-228)",
        "ru_open_at_start": "ftl-fdp.c:1467-1483: every RUH gets an RU of every RG at init",
        "ii_gc_dest": "ftl-fdp.c:964-970, 739-744: an II victim's valid pages go to the last RUH's curr_ru",
    }))
