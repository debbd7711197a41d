"""Trace side of kvbed: lifecycle schema, importers, tier simulator, hints, layout, replayer, guest agent."""

import testbed  # noqa: F401,E402  (keys numba's kernel cache before any kernel compiles)
