"""The VM testbed: QEMU guests with an emulated conv/FDP/ZNS NVMe namespace or CXL memory.

- :mod:`testbed.vm.image`: the guest image (images/guest recipe + the agent), cached by recipe hash;
- :mod:`testbed.vm.accel`: KVM or TCG, probed once per host, never hanging;
- :mod:`testbed.vm.qemu`: the VM devices' QEMU arguments, derived from the device parameter dataclasses;
- :mod:`testbed.vm.backends`: which emulator (QEMU, FEMU) runs the guest and how it gets the device;
- :mod:`testbed.vm.cmdline`: the full command line of one VM, from the two;
- :mod:`testbed.vm.vm`: lifecycle (up, attach, status, down) with a state directory per VM;
- :mod:`testbed.vm.client`: the host side of the agent protocol, with timeouts and liveness;
- :mod:`testbed.vm.target`: ``VmTarget``, what a replay submits op batches to;
- :mod:`testbed.vm.checks`: cross-checks of the op stream against the device's log pages;
- :mod:`testbed.vm.replay`: ``kvbed replay --target vm``: the replay's ops through a VM, the model of
  the VM's geometry for WAF/GC, collectors and cross-checks in the run directory.
"""
