"""The openai embedder over real HTTP to the fake server's /embeddings endpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from memtest_support import PROJECT_A, Clock

from qwenmem_tui.config import Settings
from qwenmem_tui.memory.embed import OpenAIEmbedder
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI, HTTPError
from qwenmem_tui.memory.model import WriteRequest


def _settings(fake: FakeOpenAI) -> Settings:
    return Settings.model_validate(
        {
            "llm": {"base_url": fake.base_url, "model": "m"},
            "general": {"user": "ana"},
            "memory": {"embedding": "openai", "embedding_model": "emb-1"},
        }
    )


@pytest.fixture
async def llm(fake: FakeOpenAI) -> AsyncIterator[LLMClient]:
    client = LLMClient(base_url=fake.base_url, api_key="sk-test", model="m")
    yield client
    await client.aclose()


def _embedding_calls(fake: FakeOpenAI) -> list[dict]:
    return [r.body for r in fake.requests if r.path.endswith("/embeddings")]


async def test_batches_of_ten_and_normalised_rows(fake: FakeOpenAI, llm: LLMClient) -> None:
    embedder = OpenAIEmbedder(llm, model="emb-1")
    vectors = await embedder.embed_passages([f"text {i}" for i in range(25)])
    assert vectors.shape == (25, 64)
    assert [len(b["input"]) for b in _embedding_calls(fake)] == [10, 10, 5]
    assert {b["model"] for b in _embedding_calls(fake)} == {"emb-1"}
    assert abs(float((vectors[3] ** 2).sum()) - 1.0) < 1e-5


async def test_save_and_recall_through_the_endpoint(
    fake: FakeOpenAI, llm: LLMClient, mem_paths: Paths, clock: Clock
) -> None:
    svc = await MemoryService.open(_settings(fake), mem_paths, llm=llm, clock=clock)
    try:
        saved = await svc.save(
            WriteRequest("project", "db_engine", "PostgreSQL 15", origin="tool", project=PROJECT_A)
        )
        result = await svc.recall("project db engine: PostgreSQL 15", project=PROJECT_A, min_score=-1)
        assert result.ids == [saved.memory.id]
        assert svc.index.embedder_id == "openai:emb-1"
    finally:
        await svc.close()


async def test_an_embedding_outage_keeps_the_memory_and_embeds_it_later(
    fake: FakeOpenAI, llm: LLMClient, mem_paths: Paths, clock: Clock
) -> None:
    svc = await MemoryService.open(_settings(fake), mem_paths, llm=llm, clock=clock)
    try:
        # The client retries twice; three failures make the outage stick.
        fake.script_embeddings(*[HTTPError(500, {"error": {"message": "down"}})] * 3)
        saved = await svc.save(
            WriteRequest("user", "name", "The user's name is Ana", origin="tool", project=PROJECT_A)
        )
        assert saved.memory.embedding_model == ""
        assert saved.memory.id not in svc.index.ids()
    finally:
        await svc.close()
    svc = await MemoryService.open(_settings(fake), mem_paths, llm=llm, clock=clock)
    try:
        assert saved.memory.id in svc.index.ids()
        hits = await svc.recall("user name: The user's name is Ana", project=PROJECT_A, min_score=-1)
        assert hits.ids == [saved.memory.id]
    finally:
        await svc.close()
