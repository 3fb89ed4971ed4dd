"""Schema migrations, applied in order by `Database.open`.

`MIGRATIONS[i]` is one SQL script that brings `PRAGMA user_version` from `i` to
`i + 1`; the runner executes it statement by statement inside one transaction and
bumps `user_version` in that same transaction, so a crash never leaves a half-applied
version behind. Append only: never edit a script that has shipped.
"""

from __future__ import annotations

MIGRATIONS: list[str] = [
    # 1: sessions and their items (chat messages and display-only items).
    """
    CREATE TABLE sessions (
        id            TEXT PRIMARY KEY,
        project       TEXT NOT NULL,
        title         TEXT NOT NULL DEFAULT '',
        created_at    REAL NOT NULL,
        updated_at    REAL NOT NULL,
        message_count INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX sessions_by_project ON sessions (project, updated_at DESC);
    CREATE INDEX sessions_by_update ON sessions (updated_at DESC);

    CREATE TABLE items (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        type       TEXT NOT NULL,
        content    TEXT NOT NULL,
        message    TEXT,
        meta       TEXT NOT NULL DEFAULT '{}',
        created_at REAL NOT NULL
    );
    CREATE INDEX items_by_session ON items (session_id, id);
    """,
    # 2: long-term memory (qwenmem_tui/features/memory): rows with their vectors, the append-only
    # audit trail, the generation counter other processes watch, and metric counters.
    """
    CREATE TABLE memories (
        id               INTEGER PRIMARY KEY AUTOINCREMENT,
        user             TEXT NOT NULL,
        scope            TEXT NOT NULL,
        category         TEXT NOT NULL
                         CHECK (category IN ('user', 'feedback', 'project', 'reference')),
        key              TEXT NOT NULL,
        value            TEXT NOT NULL,
        origin           TEXT NOT NULL CHECK (origin IN ('user', 'tool', 'agent')),
        status           TEXT NOT NULL
                         CHECK (status IN ('active', 'superseded', 'expired', 'quarantined', 'deleted')),
        flags            TEXT NOT NULL DEFAULT '[]',
        created_at       REAL NOT NULL,
        updated_at       REAL NOT NULL,
        expires_at       REAL,
        last_recalled_at REAL,
        recall_count     INTEGER NOT NULL DEFAULT 0,
        superseded_by    INTEGER REFERENCES memories (id),
        content_hash     TEXT NOT NULL,
        embedding_model  TEXT NOT NULL DEFAULT '',
        embedding        BLOB
    );
    CREATE UNIQUE INDEX memories_one_active_key ON memories (user, scope, key)
        WHERE status = 'active';
    CREATE INDEX memories_active_hash ON memories (user, scope, content_hash)
        WHERE status = 'active';
    CREATE INDEX memories_by_status ON memories (status, user, scope, expires_at);

    CREATE TABLE memory_audit (
        id        INTEGER PRIMARY KEY AUTOINCREMENT,
        memory_id INTEGER NOT NULL,
        action    TEXT NOT NULL,
        origin    TEXT NOT NULL,
        at        REAL NOT NULL,
        reason    TEXT NOT NULL DEFAULT '',
        old_value TEXT,
        new_value TEXT
    );
    CREATE INDEX memory_audit_by_memory ON memory_audit (memory_id, id);
    CREATE TRIGGER memory_audit_no_update BEFORE UPDATE ON memory_audit
    BEGIN
        SELECT RAISE(ABORT, 'memory_audit is append-only');
    END;
    CREATE TRIGGER memory_audit_no_delete BEFORE DELETE ON memory_audit
    BEGIN
        SELECT RAISE(ABORT, 'memory_audit is append-only');
    END;

    CREATE TABLE memory_meta (
        name  TEXT PRIMARY KEY,
        value INTEGER NOT NULL
    );
    INSERT INTO memory_meta (name, value) VALUES ('generation', 0);

    CREATE TABLE memory_metrics (
        name  TEXT PRIMARY KEY,
        value REAL NOT NULL DEFAULT 0
    );
    """,
    # 3: the lexical recall channel (memory/lexical.py): an FTS5 index over the key's
    # words and the value of every active memory, external content (the text lives
    # once, in `memories`). Triggers keep it in the same transaction as the row, so a
    # supersede, forget or expiry leaves it exactly when the row leaves the active set.
    """
    CREATE VIRTUAL TABLE memories_fts USING fts5(
        key, value,
        content = 'memories', content_rowid = 'id',
        tokenize = 'porter unicode61 remove_diacritics 2'
    );
    INSERT INTO memories_fts (rowid, key, value)
        SELECT id, key, value FROM memories WHERE status = 'active';
    CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories
        WHEN new.status = 'active'
    BEGIN
        INSERT INTO memories_fts (rowid, key, value) VALUES (new.id, new.key, new.value);
    END;
    CREATE TRIGGER memories_fts_update AFTER UPDATE OF status, key, value ON memories
        WHEN old.status = 'active' OR new.status = 'active'
    BEGIN
        INSERT INTO memories_fts (memories_fts, rowid, key, value)
            SELECT 'delete', old.id, old.key, old.value WHERE old.status = 'active';
        INSERT INTO memories_fts (rowid, key, value)
            SELECT new.id, new.key, new.value WHERE new.status = 'active';
    END;
    CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories
        WHEN old.status = 'active'
    BEGIN
        INSERT INTO memories_fts (memories_fts, rowid, key, value)
            VALUES ('delete', old.id, old.key, old.value);
    END;
    """,
    # 4: "not relevant here" (memory receipts, memory/relevance.py): a person said a
    # memory did not belong with a message; recall leaves it out for similar messages in
    # that project. The query is stored redacted; the audit trail has the act.
    """
    CREATE TABLE memory_dismissals (
        id        INTEGER PRIMARY KEY AUTOINCREMENT,
        memory_id INTEGER NOT NULL,
        user      TEXT NOT NULL,
        project   TEXT NOT NULL,
        query     TEXT NOT NULL,
        at        REAL NOT NULL
    );
    CREATE INDEX memory_dismissals_by_project ON memory_dismissals (user, project, memory_id);
    """,
    # 5: a fact's identity is (user, scope, category, key): "ana" under feedback (how Ana
    # likes meetings) and "ana" under user are two facts, and one must not supersede the
    # other (issue 24). Every active set the old index allowed is allowed by the new one,
    # so no row changes; rows superseded that way before stay superseded (restorable).
    """
    DROP INDEX memories_one_active_key;
    CREATE UNIQUE INDEX memories_one_active_fact ON memories (user, scope, category, key)
        WHERE status = 'active';
    """,
    # 6: a possible restatement (memory/identity): a newer memory that may give a new value
    # of an older one, not yet decided (no model, or the model late), names the older in
    # `restates`. Both stay active; recall delivers the newer first and the older marked
    # as earlier; the idle consolidation pass asks the model and supersedes or unlinks.
    """
    ALTER TABLE memories ADD COLUMN restates INTEGER REFERENCES memories (id);
    """,
    # 7: facts know their time (issue 35): when each was stated (an import's or a
    # dialogue's date; before this, when it was saved) and, once another version
    # replaced it, until when it held — the replacing row's statement, or the moment
    # of the supersede when that row is gone.
    """
    ALTER TABLE memories ADD COLUMN stated_at REAL;
    ALTER TABLE memories ADD COLUMN valid_until REAL;
    UPDATE memories SET stated_at = created_at;
    UPDATE memories SET valid_until = coalesce(
        (SELECT max(n.created_at, memories.created_at) FROM memories AS n
         WHERE n.id = memories.superseded_by),
        updated_at)
    WHERE status = 'superseded';
    """,
    # 8: a store of years is read a page at a time (issue 40): the reviews among a
    # trail of years by their action, and a fact's versions by their links, each
    # through an index instead of a scan of every row.
    """
    CREATE INDEX memory_audit_by_action ON memory_audit (action, memory_id);
    CREATE INDEX memories_by_successor ON memories (superseded_by);
    CREATE INDEX memories_by_restated ON memories (restates);
    """,
    # 9: the sampled review's oldest rows (memory/review.py), those a model wrote or a
    # file held apart (the partial index; sqlite_store.MODEL_WRITTEN says it the same
    # way, so SQLite can use it) and the others, by age: read through an index, not
    # sorted out of every row (1 s at 100k). And which rows hold a vector of which
    # embedder, without reading each row's vector (the index's start and sync).
    """
    CREATE INDEX memories_by_vector ON memories (user, status, embedding_model, (embedding IS NULL));
    CREATE INDEX memories_by_age ON memories (user, status, created_at);
    CREATE INDEX memories_model_written ON memories (user, status, created_at)
        WHERE (origin != 'user' OR instr(flags, '"from_file"') > 0);
    """,
    # 10: /memory's first screen (issue 40): a place's rows (user, status, scope) in id
    # order — the rowid ends every index —, so a page is the first rows of a few index
    # ranges instead of every matching row sorted (40-230 ms at 100k).
    """
    CREATE INDEX memories_by_place ON memories (user, status, scope);
    """,
    # 11: a write's free key (writer._free_key: the active keys of a scope that start
    # with the write's) through the keys themselves, not every active row of the scope
    # (250-670 ms a /remember at 100k; 1 ms this way).
    """
    CREATE INDEX memories_active_key ON memories (user, scope, key) WHERE status = 'active';
    """,
    # 12: a dialogue turn's second vector, its words alone (memory/turns.py), beside the
    # row's own (the turn after the one before it, as said). Only an active row keeps
    # one, and only for its present words: the triggers drop it when the row leaves the
    # active set, its value changes or the row goes. Existing turns are embedded at
    # the next start, in the background (MemoryVectors).
    """
    CREATE TABLE memory_turn_vectors (
        id              INTEGER PRIMARY KEY REFERENCES memories (id) ON DELETE CASCADE,
        embedding_model TEXT NOT NULL,
        embedding       BLOB NOT NULL
    );
    CREATE INDEX memory_turn_vectors_by_model ON memory_turn_vectors (embedding_model);
    CREATE TRIGGER memory_turn_vectors_stale AFTER UPDATE OF status, value ON memories
    WHEN new.status != 'active' OR new.value IS NOT old.value
    BEGIN
        DELETE FROM memory_turn_vectors WHERE id = new.id;
    END;
    CREATE TRIGGER memory_turn_vectors_gone AFTER DELETE ON memories
    BEGIN
        DELETE FROM memory_turn_vectors WHERE id = old.id;
    END;
    """,
    # 13: the active dialogue turns (sqlite_store.missing_turn_vectors, which says the
    # condition the same way so SQLite can use it): what every start looks through for
    # turns without a second vector, not every active row's flags (80 ms at 100k; 20).
    """
    CREATE INDEX memories_dialogue_turns ON memories (user)
        WHERE status = 'active' AND instr(flags, '"dialogue_turn"') > 0;
    """,
]
