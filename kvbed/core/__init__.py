"""The foundation every room of kvbed stands on: the only part of ``testbed`` that kvreplay/ and
devicemodels/ may import.

- :mod:`~kvbed.core.errors` - ``KvbedError``: bad input, one located line, exit status 2;
- :mod:`~kvbed.core.registry` - one registry per extension point, keyed by lowercase name;
- :mod:`~kvbed.core.params` - parameter fields (``param(...)``), the unit parser and ``format_size``,
  ``k=v`` overrides, configs;
- :mod:`~kvbed.core.atomicio` - write to a temporary name, then rename;
- :mod:`~kvbed.core.version` - ``__version__``.

Standard library and numpy only; importing any of it has no side effects. Layers point down:
testbed (CLI, VM, studies, reports) -> kvreplay (trace side) and devicemodels (physics) -> kvbed.core.
"""
