"""A fact the write linked to an older one is still one of the versions
``Recaller._close_versions`` reads by meaning: its own newer restatement, which the
write did not link, comes first (issue 39 item 3, the current fact first)."""

from __future__ import annotations

import pytest
from memtest_support import PROJECT_A

from qwenmem_tui.memory.model import RememberRequest, WriteRequest
from qwenmem_tui.memory.service import MemoryService

KNOWN = [
    ("occupation", "Pracuju jako zubařka na soukromé klinice."),
    ("employer", "मैं पिछले तीन साल से इंफोसिस में काम कर रही हूँ।"),
]


@pytest.mark.parametrize(
    ("older", "newer", "question"),
    [
        ("Jag jobbar på en HP-dator", "Jag har bytt till en MacBook", "Vilken dator använder jag?"),
        ("Ik werk in de nachtdienst", "Ik draai tegenwoordig alleen nog dagdiensten", "Werk ik 's nachts of overdag?"),
    ],
    ids=["sv-laptop", "nl-shift"],
)
async def test_a_linked_fact_is_still_read_as_a_version_of_its_restatement(
    e5_service: MemoryService, older: str, newer: str, question: str
) -> None:
    """"Jag jobbar på en HP-dator" reads as work: the write linked it to the employer as
    a newer version (``employer_2``). As a known version it was left to ``current_first``,
    which orders it against the employer, and the laptop's restatement (``note``) came
    after it (in a store of 78 facts: identity_fresh 55 -> 60 of 69 newer first,
    identity_fresh2 43 -> 46 of 58)."""
    for key, value in KNOWN:
        await e5_service.save(WriteRequest("user", key, value, origin="user", project=PROJECT_A))
    first = await e5_service.remember(RememberRequest(older, project=PROJECT_A))
    then = await e5_service.remember(RememberRequest(newer, project=PROJECT_A))
    await e5_service.consolidated()
    ids = (await e5_service.recall(question, project=PROJECT_A)).ids
    assert then.memory.id in ids
    assert first.memory.id not in ids or ids.index(then.memory.id) < ids.index(first.memory.id)
