"""kvbed's version: the installed distribution's, or a marked source-tree version when not installed."""

from importlib.metadata import PackageNotFoundError, version as _dist_version

try:
    __version__ = _dist_version("kvbed")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.1.0+src"
