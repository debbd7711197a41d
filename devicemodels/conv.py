"""``conv``: a conventional SSD: one host write frontier, one GC frontier, page-level mapping."""

from __future__ import annotations

from devicemodels.base import DEVICES
from devicemodels.ftl_device import FtlDevice
from devicemodels.params import FlashParams


@DEVICES.register("conv")
class ConvDevice(FtlDevice):
    """Page-mapped FTL; placement ids are ignored (every write shares one frontier)."""

    param_classes = {"flash": FlashParams}

    def __init__(self, flash: FlashParams | None = None):
        super().__init__(flash)
        self.params = {"flash": self.flash}
