"""The runtime's light read path: what a one-shot command reads of the sessions.

`qwenmem sessions`, `sessions export` and the `--resume ID` check read a few rows and
exit; opening the `Runtime` for them would import the SDK, the chat loop and the
features' cores for nothing. This module opens only the database, and never creates
it: a read of a home with no database finds no session. Faces read through it (or the
runtime); none opens the database itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from qwenmem_tui.paths import Paths, project_id, project_root
from qwenmem_tui.storage.database import Database
from qwenmem_tui.storage.sessions import SessionInfo, SessionStore


class StartupError(Exception):
    """The runtime cannot open (or a session cannot be found); ``str(e)`` is the one
    line the user sees."""


@asynccontextmanager
async def session_reader(paths: Paths) -> AsyncIterator[SessionStore | None]:
    """The session store of the home's database, closed on exit; None when there is
    no database (reading must not create one as a side effect)."""
    if not paths.db_file.exists():
        yield None
        return
    db = await Database.open(paths.db_file)
    try:
        yield SessionStore(db)
    finally:
        await db.close()


async def find_session(store: SessionStore | None, project: str, ref: str) -> SessionInfo:
    """The session of `project` whose id is `ref` or uniquely starts with it (as
    `qwenmem sessions` lists them); StartupError with the one line to show otherwise."""
    found = await store.find_session(project, ref) if ref and store is not None else []
    if len(found) == 1:
        return found[0]
    if found:
        raise StartupError(f'"{ref}" matches several sessions of this project: type more of the id.')
    raise StartupError(f'No session with id "{ref}" in this project ({project}).')


async def check_resume(paths: Paths, cwd: Path, ref: str) -> str:
    """The full id `--resume ref` opens, checked before a face starts so a wrong id is
    one line in the terminal; StartupError otherwise. Never creates the database."""
    project = project_id(project_root(cwd))
    async with session_reader(paths) as store:
        return (await find_session(store, project, ref)).id
