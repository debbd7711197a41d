"""The embedded replayer: a lifecycle trace's tier, placed by a hint policy, on a device model.

Pieces (each its own module):

- :mod:`~kvreplay.replay.params` - ``ReplayParams`` (CLI options derive from it; ``LayoutParams`` is
  the layout's, :mod:`kvreplay.layout.params`);
- :mod:`~kvreplay.replay.config` - ``build_config`` / ``RunConfig`` (config.json), the sizing step;
- :mod:`~kvreplay.replay.scan` - pass 1: peak live data, largest object, peak write rate, and for
  offline policies the death of every write;
- :mod:`~kvreplay.replay.sizing` - coarse replay defaults (1 MiB mapping unit, full-stripe RUs/zones)
  and device capacity/parallelism sized from the scan;
- :mod:`~kvreplay.replay.produce` - trace -> hints -> layout -> op segments, independent of any target;
- :mod:`~kvreplay.replay.target` - what ops are submitted to, and ``TargetFailed``;
- :mod:`~kvreplay.replay.engine` - ``Replay``: ``run()`` submits the segments to a target (the model,
  or whatever ``target_factory`` returns) and records results;
- :mod:`~kvreplay.replay.result` - result.json's fio-shaped job and the time-series rows;
- :mod:`~kvreplay.replay.record` - per-op and per-object latency histograms (numba);
- :mod:`~kvreplay.replay.prefetch` - the reader / producer threads.

Use: ``parts = Replay(build_config(trace, "fdp", "oracle", ["fill_ratio=1.0"])).run()`` and
``testbed.results.write_run(out_dir, parts)``; or ``kvbed replay`` on the command line. The same
ops through a QEMU guest: :mod:`testbed.vm.replay` (``kvbed replay --target vm [--vm NAME]``), which
plugs a VM target into ``Replay`` via ``target_factory``/``fit_params``.
"""

from kvreplay.layout.params import LayoutParams
from kvreplay.replay.config import RunConfig, build_config
from kvreplay.replay.engine import Replay, replay
from kvreplay.replay.params import ReplayParams

__all__ = ["Replay", "RunConfig", "build_config", "replay", "ReplayParams", "LayoutParams"]
