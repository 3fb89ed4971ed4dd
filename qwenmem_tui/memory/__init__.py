"""Long-term memory: persistent facts that outlive a session.

Three layers are kept apart on purpose, because writing to one while expecting an
effect in another is the classic memory bug:

* **history** — the raw chat messages of a session (``storage/sessions.py``);
* **cache** — per-session derived state such as compaction summaries and the set of
  memories already surfaced in this session (``chat/``, ``features/compaction/``);
* **memory** — this package: facts persisted across sessions, with a store (SQL rows
  and vectors), a local FAISS index fed from the store, recall, a poisoning guard and
  an audit trail. It is a library that knows no face: the registration, CLI, routes,
  MCP tools and hooks that present it are its adapter, ``features/memory/``.

Import from the submodules (``memory.service.MemoryService`` is the entry point);
this package init stays empty so that importing the model does not load FAISS.
"""
