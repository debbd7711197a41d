"""``HINTS``: the hint policies by lowercase name.

Kept apart from the package ``__init__`` so a policy module can register itself without importing the
package that imports it (as :mod:`kvreplay.faults.registry`).
"""

from __future__ import annotations

from kvbed.core.registry import Registry
from kvreplay.hints.plugins import PLUGINS

#: placement-hint policies (``--hints NAME``): one module each in this package; researchers' own through
#: ``--hints module:Class``, ``--hints path/file.py:Class`` or the ``kvbed.hints`` entry points (plugins.py)
HINTS: Registry[type] = Registry("hint policy", plugins=PLUGINS)
