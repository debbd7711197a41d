"""The kvbed guest agent: runs inside the QEMU guest, next to the emulated device.

It receives batches of operations over ZMQ, issues them as NVMe passthrough
commands (or CXL devdax stores/loads), measures each one with the guest's clock
and sends completion records back. It must run on the guest's stock Python 3.11
with only the standard library and pyzmq, so nothing here imports numpy or any
other kvbed module: the host imports :mod:`kvreplay.agent.wire` to speak the
same protocol.

The image recipe copies this directory into the guest as the package
``kvbed_agent`` and PID 1 runs ``python3 -m kvbed_agent``.
"""

AGENT_VERSION = "1.0"
