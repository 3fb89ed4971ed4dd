"""Writing an export to a file a person named, without harming what is already there.

`qwenmem sessions export -o FILE` and the other commands that export to a named file
share it: a symbolic link is refused (a planted link would send the export, and the
truncation, to its target), and an existing file is kept unless the person said ``--force``. The checks
are the open's own flags (``O_NOFOLLOW``, ``O_EXCL``), not a look before the open, so a
link planted between a check and the write is refused too.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class ExportRefused(Exception):
    """The export was not written; the message says why and what to do, in one line."""


def write_export(path: Path, text: str, *, force: bool = False) -> None:
    """Write ``text`` (UTF-8) to ``path``: never through a link, never over an existing
    file unless ``force`` (then only over a regular file). ExportRefused otherwise."""
    try:
        found = path.lstat()
    except FileNotFoundError:
        found = None
    except OSError as exc:
        raise ExportRefused(f"cannot write {path}: {exc.strerror or exc}") from None
    if found is not None:
        if stat.S_ISLNK(found.st_mode):
            raise ExportRefused(
                f"{path} is a symbolic link: qwenmem does not write an export through one; "
                "give the real path"
            )
        if not stat.S_ISREG(found.st_mode):
            raise ExportRefused(f"{path} exists and is not a regular file: not written")
        if not force:
            raise ExportRefused(f"{path} exists: not overwritten (add --force to replace it)")
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    flags |= os.O_TRUNC if force else os.O_EXCL
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise ExportRefused(f"{path} appeared while exporting: not overwritten") from None
    except OSError as exc:
        raise ExportRefused(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        path.unlink(missing_ok=True)  # half an export would pass for a whole one
        raise ExportRefused(
            f"cannot write {path}: {exc.strerror or exc} (nothing exported)"
        ) from None
