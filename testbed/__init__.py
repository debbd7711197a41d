"""kvbed: KV-cache lifecycle testbed for flash (conv/FDP/ZNS) and CXL devices.

The top room (CLI, VM testbed, results, reports) and, in :mod:`kvbed.core`, the foundation the other
rooms (kvreplay, devicemodels) stand on. Importing this package does nothing.
"""
