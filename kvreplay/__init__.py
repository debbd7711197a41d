"""Trace side of kvbed: lifecycle schema, importers, tier simulator, hints, layout, replayer, guest agent."""

