"""Write outputs under a temporary name and rename, so a failure never leaves a half file.

What kvbed writes is an ordinary output: files get 0o666 and directories 0o777 less the umask (0644 and
0755 under the usual umask 022, private under 077), as ``open``/``mkdir`` would give them. The temporary
names are hidden (leading dot) and made with ``O_EXCL``/``mkdir``, so nobody else's file is ever reused;
``tempfile.mkstemp``/``mkdtemp`` are not used because they make the result 0600/0700 whatever the umask.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from pathlib import Path
from typing import Any, Iterator


def check_can_make_dir(path: str | os.PathLike, where: str) -> None:
    """Refuse, before any work, a directory path that cannot be made: a file on its path, or a nearest
    existing ancestor that is not writable."""
    from kvbed.core.errors import KvbedError

    for p in (Path(path), *Path(path).parents):
        if p.exists():
            if not p.is_dir():
                raise KvbedError(f"{p} is not a directory", where=where)
            if not os.access(p, os.W_OK | os.X_OK):
                raise KvbedError(f"{p} is not writable", where=where)
            return


def temp_path_for(final: Path, mode: int = 0o666) -> Path:
    """A new empty hidden file beside ``final`` (its directory made if needed) to write into and
    rename. ``mode`` as for ``os.open`` (the umask applies): 0o666 gives the file the permissions a
    plain create would."""
    final.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = final.with_name(f".{final.name}.{secrets.token_hex(4)}.tmp")
        try:
            os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, mode))
            return tmp
        except FileExistsError:
            continue


def temp_dir_for(final: Path) -> Path:
    """A new empty hidden directory beside ``final`` (its parent made if needed) to fill and rename into
    place: mode 0o777 less the umask, as a plain ``mkdir`` gives."""
    final.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = final.with_name(f".{final.name}.{secrets.token_hex(4)}.tmp")
        try:
            os.mkdir(tmp, 0o777)
            return tmp
        except FileExistsError:
            continue


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it into place only on success."""
    final = Path(path)
    tmp_path = temp_path_for(final)
    try:
        yield tmp_path
        os.replace(tmp_path, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


def write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, default=json_default) + "\n")


def json_default(o: Any) -> Any:
    """``json.dumps(default=...)`` for numpy scalars and arrays and paths."""
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
