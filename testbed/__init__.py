"""kvbed: KV-cache lifecycle testbed for flash (conv/FDP/ZNS) and CXL devices."""

from importlib.metadata import PackageNotFoundError, version as _dist_version

try:
    __version__ = _dist_version("kvbed")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.1.0+src"

from testbed import numbacache as _numbacache

_numbacache.configure()
