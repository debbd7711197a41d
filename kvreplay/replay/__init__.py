"""The embedded replayer: a lifecycle trace's tier, placed by a hint policy, on a device model.

Pieces (each its own module):

- :mod:`~kvreplay.replay.params` - ``ReplayParams`` and ``LayoutParams`` (CLI options derive from them);
- :mod:`~kvreplay.replay.scan` - pass 1: peak live data, largest object, peak write rate, and for
  offline policies the death of every write;
- :mod:`~kvreplay.replay.sizing` - coarse replay defaults (1 MiB mapping unit, full-stripe RUs/zones)
  and device capacity/parallelism sized from the scan;
- :mod:`~kvreplay.replay.engine` - ``build_config`` / ``RunConfig`` (config.json) and ``Replay``:
  ``op_segments()`` produces ops (trace -> hints -> layout) independently of any target, ``run()``
  submits them to a target (the model, or whatever ``target_factory`` returns) and records results;
- :mod:`~kvreplay.replay.record` - per-op and per-object latency histograms (numba);
- :mod:`~kvreplay.replay.prefetch` - the reader / producer threads.

Use: ``parts = Replay(build_config(trace, "fdp", "oracle", ["fill_ratio=1.0"])).run()`` and
``testbed.results.write_run(out_dir, parts)``; or ``kvbed replay`` on the command line. The same
ops through a QEMU guest: :mod:`testbed.vm.replay` (``kvbed replay --target vm [--vm NAME]``), which
plugs a VM target into ``Replay`` via ``target_factory``/``fit_params``.
"""

from kvreplay.replay.engine import Replay, RunConfig, build_config, replay
from kvreplay.replay.params import LayoutParams, ReplayParams

__all__ = ["Replay", "RunConfig", "build_config", "replay", "ReplayParams", "LayoutParams"]
