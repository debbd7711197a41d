"""FEMU as a VM backend: build it from source once per source hash, and derive its device options.

- :mod:`testbed.femu.build`: ``kvbed femu build|status``: unpack a FEMU tree (the vendored tarball or a
  user's checkout), configure and build ``qemu-system-x86_64`` with a progress display, and cache the
  binary (plus the firmware it needs) under ``<cache>/femu/<sha256 of the source>/``; an unchanged
  source is never rebuilt;
- :mod:`testbed.femu.devices`: FEMU's ``-device femu`` / ``femu-subsys`` options for conv, fdp and zns,
  derived from the same parameter dataclasses as the device models, and one-line refusals of what
  FEMU cannot express. The mapping is written down in that module's docstring and printed by
  ``kvbed femu args``;
- :mod:`testbed.femu.compare` and :mod:`testbed.femu.kvcheck`: FEMU and the model on the same command
  stream (WAF, media bytes, erases); :mod:`testbed.femu.latency`: the same for per-write latency, with the
  guest's closed loop and the emulator's completion delivery delay that FEMU's guest sees on top of the
  device's latency (scripts/bench_femu_lat.py, docs/guides/femu.md).

The VM lifecycle (up, status, down, replay) is testbed.vm's; FEMU is one entry of its backend registry
(:mod:`testbed.vm.backends`).
"""
