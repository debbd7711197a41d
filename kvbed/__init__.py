"""kvbed's Python entry points for notebooks and scripts (``kvbed.study.load(DIR)``); the code lives in the
testbed, kvreplay and devicemodels packages."""
