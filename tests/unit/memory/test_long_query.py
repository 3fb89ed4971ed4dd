"""A question asked around a long paste (a log, a trace) is what recall reads: people
write their own words before or after what they paste (memory/embed.py, ``clip_query``)."""

from __future__ import annotations

import pytest
from memtest_support import PROJECT_A

from qwenmem_tui.memory.model import WriteRequest
from qwenmem_tui.memory.service import MemoryService

LOG = "\n".join(
    f"2026-12-05 10:{i:02d}:07 INFO worker-{i % 7} processed batch {i} in {i * 3 % 97} ms, queue depth {i * 7 % 31}"
    for i in range(60)
)
TRACE = "Traceback (most recent call last):\n" + "\n".join(
    f'  File "/srv/app/billing/handlers/h{i}.py", line {10 + i}, in handle_{i}\n'
    "    result = await self.client.fetch(order_id)"
    for i in range(25)
) + "\nConnectionRefusedError: [Errno 111] Connection refused"
FACTS = [
    ("project", "db_server", "Сервер за базу података је db-prod-7 на порту 5433"),
    ("project", "workers", "The batch workers log their queue depth every minute to Grafana"),
    ("project", "billing_client", "The billing handlers call the orders API through an async client"),
    ("user", "car", "My car is a Toyota Corolla"),
    ("project", "ci", "CI runs on GitHub Actions"),
]


@pytest.mark.parametrize(
    "message",
    [
        f"{LOG}\n\nna kom portu radi baza podataka, ovaj log je iz produkcije",
        f"na kom portu radi baza podataka? evo loga:\n{LOG}",
        f"Welcher Port ist das?\n{LOG}\nDas ist unsere Produktionsdatenbank, oder?",
        f"{TRACE}\n\n¿en qué puerto corre la base de datos de producción?",
        f"この本番データベースのポートは何番？\n{TRACE}",
    ],
    ids=["after-log", "before-log", "around-log", "after-trace", "before-trace"],
)
async def test_a_question_around_a_long_paste_recalls_its_fact_first(
    e5_service: MemoryService, message: str
) -> None:
    """Embedded whole (its first 2,000 characters), the paste drowned the question: the
    note about the log's workers or the trace's handlers came first, or nothing arrived
    in time (e2e10: a 4.7k-character log, 1.5-3 s to embed, past memory.api_wait_ms)."""
    for category, key, value in FACTS:
        await e5_service.save(WriteRequest(category, key, value, origin="user", project=PROJECT_A))
    found = await e5_service.recall(message, project=PROJECT_A)
    assert [m.key for m in found.memories][:1] == ["db_server"]
