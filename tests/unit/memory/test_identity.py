"""Fact identity (issue 14 item 1): one active memory per subject on every write path.

The rule is tested pure; the service tests write through real SQLite and FAISS, and
the model's judgement goes over real HTTP to the fake server.
"""

from __future__ import annotations

import json
import threading

import pytest
from memtest_support import PROJECT_A, PROJECT_B, Clock, make_settings

from qwenmem_tui.memory.backup import import_lines
from qwenmem_tui.memory.identity import by_meaning, decide
from qwenmem_tui.memory.judge import JUDGE_SYSTEM_PROMPT, parse_judgement
from qwenmem_tui.memory.model import (
    AuditAction,
    Category,
    Memory,
    MemoryDraft,
    Origin,
    RememberRequest,
    Status,
    WriteAction,
    WriteRequest,
)
from qwenmem_tui.memory.recall import Candidate
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.memory.timeline import history
from qwenmem_tui.memory.subject import (
    about,
    classify_note,
    file_note,
    restates,
)
from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, by_system_prompt


def memory(id: int, key: str, value: str, category: str = "user") -> Memory:
    return Memory(
        id=id,
        user="ana",
        scope="global",
        category=Category(category),
        key=key,
        value=value,
        origin=Origin.USER,
        status=Status.ACTIVE,
        flags=[],
        created_at=0.0,
        updated_at=0.0,
        expires_at=None,
    )


# --- the rule, pure --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("my favourite editor is vim", ("user", "favourite_editor")),
        ("My favorite editor is helix", ("user", "favourite_editor")),
        ("meu editor favorito é helix", ("user", "favourite_editor")),
        ("mi editor favorito es vim", ("user", "favourite_editor")),
        ("I live in São Paulo", ("user", "home_city")),
        ("I moved to Lisbon", ("user", "home_city")),
        ("I now live in Lisbon", ("user", "home_city")),
        ("I've just relocated to Berlin", ("user", "home_city")),
        ("eu moro em São Paulo", ("user", "home_city")),
        ("na verdade mudei para Lisboa", ("user", "home_city")),
        ("vivo en Madrid", ("user", "home_city")),
        ("me mudé a Sevilla", ("user", "home_city")),
        ("I work at Acme", ("user", "employer")),
        ("my name is Ana", ("user", "name")),
        ("the deploy target is staging", ("project", "deploy_target")),
        ("deploy target: prod", ("project", "deploy_target")),
        ("this project deploys to fly.io", ("project", "deploy_target")),
        ("we use pytest for tests", ("project", "tool_for_tests")),
        ("we use poetry for dependency management", ("project", "tool_for_dependency_management")),
        ("o projeto atual é Beta", ("project", "current_project")),
        ("the project codename is Bluebird", ("project", "project_codename")),
        ("remember that my shell is fish", ("user", "shell")),
        ("Please never use emojis", ("feedback", "use_emojis")),
        ("always use emojis", ("feedback", "use_emojis")),
        ("don't push to main", ("feedback", "push_main")),
        ("I prefer tabs over spaces", ("feedback", "preference_spaces_tabs")),
        ("I prefer spaces to tabs", ("feedback", "preference_spaces_tabs")),
        ("prefiero vim en vez de emacs", ("feedback", "preference_emacs_vim")),
        ("my location is Porto", ("user", "city")),
        ("docs are at https://x.example", ("reference", "docs")),
    ],
)
def test_a_note_is_keyed_by_its_subject_never_its_value(text: str, expected: tuple[str, str]) -> None:
    assert classify_note(text) == expected


def same_fact(a: tuple[str, str], b: tuple[str, str], category: str = "user") -> bool:
    return restates(about(*a), about(*b), Category(category))


def test_subjects_match_across_keys_languages_and_value_carrying_keys() -> None:
    assert same_fact(("current_city", "Lives in Lisbon"), ("home_city", "I live in São Paulo"))
    assert same_fact(("home_city", "I moved to Porto"), ("live_lisbon", "I live in Lisbon"))
    assert same_fact(
        ("favourite_editor", "my favourite editor is helix"),
        ("favourite_editor_vim", "my favourite editor is vim"),
    )
    # Different subjects that look alike stay apart.
    assert not same_fact(("favourite_editor", "x is vim"), ("favourite_colour", "blue"))
    assert not same_fact(("python_version", "Python 3.12"), ("node_version", "Node 20"))
    assert not same_fact(("never_use_tabs", "never use tabs"), ("never_use_emojis", "never use emojis"))
    assert not same_fact(("home_city", "I live in Lisbon"), ("work_city", "I work in Porto"))


def test_equal_values_under_different_subjects_are_different_facts() -> None:
    """Issue 24: "true" for two services, Dave and Bob as two people's managers."""
    assert not same_fact(("billing_service_enabled", "true"), ("auth_service_enabled", "true"), "project")
    assert not same_fact(("carol_manager", "Dave"), ("alice_manager", "Bob"), "project")
    assert not same_fact(("phone", "Phone: Alice 555-0101"), ("phone", "Phone: Bob 555-0102"), "project")
    assert same_fact(("a", "Carol's manager: Dave"), ("b", "o gerente da Carol é Erin"), "project")


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("Ana leads the backend team", "Ana: prefers short meetings before noon"),
        ("Ana: prefers short meetings before noon", "Ana: works remotely on Fridays"),
        ("Ana's birthday is May 3", "Ana's role is tech lead"),
        ("TODO: renew the TLS certificate", "TODO: update the billing docs"),
        ("Decision: use Postgres for events", "Decision: keep Redis for sessions"),
        ("Caroline: I moved to Berlin last week", "Caroline: I live near the park now"),
        ("Bruno prefers tabs over spaces", "Bruno lives in Madrid"),
    ],
)
def test_several_facts_about_one_entity_are_each_their_own(first: str, second: str) -> None:
    assert not same_fact(("k1", first), ("k2", second), "project")


def test_the_rule_supersedes_the_same_fact_under_other_keys() -> None:
    home = memory(1, "home_city", "I live in São Paulo")
    legacy = memory(2, "live_sao_paulo", "I live in São Paulo, Brazil")
    colour = memory(3, "favourite_colour", "my favourite colour is blue")
    user = Category.USER
    # The write's own key (an explicit one is never rewritten); both old values give way.
    chosen = decide("current_city", "Lives in Lisbon", user, [colour, home, legacy])
    assert (chosen.key, chosen.replaces) == ("current_city", (1, 2))
    # Said again in the same words: /remember refreshes the row.
    again = decide("city", "I live in São Paulo", user, [colour, home], explicit=False)
    assert again.same_as is home and again.key == "home_city"

    editor = memory(4, "favourite_editor_vim", "my favourite editor is vim")
    chosen = decide("favourite_editor", "my favourite editor is helix", user, [editor])
    assert (chosen.key, chosen.replaces) == ("favourite_editor", (4,))

    assert decide("favourite_shell", "fish", user, [colour, home]) == decide("favourite_shell", "fish", user, [])


def test_a_near_repeat_is_kept_and_flagged_never_merged() -> None:
    first = memory(1, "todo_1", "TODO: renew the TLS certificate for the api", "project")
    chosen = decide("todo_2", "TODO: renew the TLS certificate for the api!", Category.PROJECT, [first])
    assert (chosen.key, chosen.replaces, chosen.possible_duplicates) == ("todo_2", (), (1,))


def test_the_model_judgement_is_validated_against_the_candidates() -> None:
    home, colour = memory(1, "home_city", "I live in São Paulo"), memory(3, "colour", "blue")
    candidates = [home, colour]
    update = parse_judgement('```json\n{"action": "update", "id": 1}\n```', "city_now", "Lisbon", candidates)
    assert update is not None and (update.key, update.decided_by) == ("home_city", "model")
    kept = parse_judgement('{"action": "update", "id": 1}', "city_now", "Lisbon", candidates, explicit=True)
    assert kept is not None and (kept.key, kept.replaces) == ("city_now", (1,))
    noop = parse_judgement('{"action": "noop", "id": "#3"}', "colour_pref", "blue", candidates)
    assert noop is not None and noop.same_as is colour
    add = parse_judgement('{"action": "add", "id": null}', "shell", "fish", candidates)
    assert add is not None and (add.key, add.replaces) == ("shell", ())
    for bad in ('{"action": "update", "id": 99}', '{"action": "merge"}', "sure!", "[1]",
                '{"action": "update", "id": true}'):
        assert parse_judgement(bad, "city_now", "Lisbon", candidates) is None


# --- one truth through every write path -------------------------------------------------


async def active(service: MemoryService) -> list[tuple[str, str]]:
    return [(m.key, m.value) for m in await service.list(statuses=[Status.ACTIVE])]


async def test_remember_twice_leaves_one_active_memory_under_the_subject(
    service: MemoryService,
) -> None:
    first = await service.remember(RememberRequest("my favourite editor is vim", project=PROJECT_A))
    second = await service.remember(RememberRequest("my favourite editor is helix", project=PROJECT_A))
    assert second.action is WriteAction.SUPERSEDED and second.superseded == [first.memory.id]
    assert await active(service) == [("favourite_editor", "my favourite editor is helix")]
    old = await service.get(first.memory.id)
    assert old is not None and old.status is Status.SUPERSEDED
    assert old.superseded_by == second.memory.id
    hit = await service.recall("which editor do I use?", project=PROJECT_A, min_score=-1)
    assert "helix" in hit.block and "vim" not in hit.block


@pytest.mark.parametrize(
    "statements",
    [
        ["I live in São Paulo", "I moved to Lisbon"],
        ["I live in São Paulo", "I live in São Paulo", "I now live in Lisbon"],
        ["eu moro em São Paulo", "mudei para Lisboa"],
        ["vivo en São Paulo", "me mudé a Lisboa"],
        ["I live in São Paulo", "eu moro em Lisboa"],
    ],
)
async def test_the_seed_s_move_is_one_truth(service: MemoryService, statements: list[str]) -> None:
    """"Why does it still think I live in São Paulo after I said three times I moved?\""""
    for text in statements:
        await service.remember(RememberRequest(text, project=PROJECT_A))
    [(key, value)] = await active(service)
    assert key == "home_city" and ("Lisboa" in value or "Lisbon" in value)
    hit = await service.recall("where do I live?", project=PROJECT_A, min_score=-1)
    assert "São Paulo" not in hit.block


async def test_save_memory_under_another_key_of_the_same_subject_supersedes_it(
    service: MemoryService,
) -> None:
    await service.remember(RememberRequest("I live in São Paulo", project=PROJECT_A))
    result = await service.save(
        WriteRequest("user", "current_city", "Lives in Lisbon", origin="tool", project=PROJECT_A)
    )
    # The model's key is kept as given (issue 24); the old value is gone all the same.
    assert result.memory.key == "current_city" and result.action is WriteAction.SUPERSEDED
    assert await active(service) == [("current_city", "Lives in Lisbon")]
    # `memory history` says the rule found them one fact (the write was the tool's).
    old, _ = await history(service, "current_city", project=PROJECT_A)
    assert (old.replaced_by, old.decided_by) == (result.memory.id, "rule"), old.why


async def test_save_memory_keys_carrying_the_value_still_make_one_truth(
    service: MemoryService,
) -> None:
    for editor in ("vim", "helix"):
        await service.save(
            WriteRequest(
                "user", f"favourite_editor_{editor}", f"The user's favourite editor is {editor}",
                origin="tool", project=PROJECT_A,
            )
        )
    assert await active(service) == [("favourite_editor_helix", "The user's favourite editor is helix")]


async def test_a_value_carrying_legacy_key_is_superseded_in_the_same_write(
    service: MemoryService, clock: Clock
) -> None:
    """Rows saved before keys named subjects (the old /remember keyed by the value)."""
    legacy = await service.store.write(
        MemoryDraft(Category.USER, "favourite_editor_vim", "my favourite editor is vim",
                    Origin.USER, "global", "ana"),
        flags=[], expires_at=None, vector=None, embedding_model="", now=clock.now,
    )
    live = await service.store.write(
        MemoryDraft(Category.USER, "live_sao_paulo", "I live in São Paulo",
                    Origin.USER, "global", "ana"),
        flags=[], expires_at=None, vector=None, embedding_model="", now=clock.now,
    )
    # Written past the service: embedded and indexed as a start would.
    await service.embed_missing()
    await service.reindex()
    result = await service.remember(RememberRequest("my favourite editor is helix", project=PROJECT_A))
    assert result.superseded == [legacy.memory.id]
    assert await active(service) == [
        ("live_sao_paulo", "I live in São Paulo"),
        ("favourite_editor", "my favourite editor is helix"),
    ]
    [entry] = [e for e in await service.audit(legacy.memory.id) if e.action is AuditAction.SUPERSEDE]
    assert entry.reason == f"superseded by #{result.memory.id}"
    moved = await service.remember(RememberRequest("I moved to Lisbon", project=PROJECT_A))
    assert moved.superseded == [live.memory.id] and moved.memory.key == "home_city"
    assert await active(service) == [
        ("favourite_editor", "my favourite editor is helix"),
        ("home_city", "I moved to Lisbon"),
    ]


async def test_different_subjects_and_scopes_stay_apart(service: MemoryService) -> None:
    await service.remember(RememberRequest("my favourite editor is vim", project=PROJECT_A))
    await service.remember(RememberRequest("my favourite colour is blue", project=PROJECT_A))
    await service.remember(RememberRequest("Please never use emojis", project=PROJECT_A))
    await service.remember(RememberRequest("Please never use tabs", project=PROJECT_A))
    await service.remember(RememberRequest("the deploy target is staging", project=PROJECT_A))
    await service.remember(RememberRequest("the deploy target is prod", project=PROJECT_B))
    assert len(await active(service)) == 6


async def test_a_reversed_rule_or_preference_replaces_the_old_one(service: MemoryService) -> None:
    await service.remember(RememberRequest("Please never use emojis", project=PROJECT_A))
    await service.remember(RememberRequest("I prefer tabs over spaces", project=PROJECT_A))
    await service.remember(RememberRequest("actually, always use emojis", project=PROJECT_A))
    await service.remember(RememberRequest("I prefer spaces to tabs", project=PROJECT_A))
    assert await active(service) == [
        ("use_emojis", "actually, always use emojis"),
        ("preference_spaces_tabs", "I prefer spaces to tabs"),
    ]


async def test_an_approved_restatement_replaces_its_subject(service: MemoryService) -> None:
    """Held for review, it supersedes nothing; approved, it replaces the subject's value."""
    await service.remember(RememberRequest("I live in São Paulo", project=PROJECT_A))
    held = await service.save(
        WriteRequest(
            "user", "location", "I moved to Lisbon <img src=x onerror=alert(1)>",
            origin="tool", project=PROJECT_A,
        )
    )
    assert held.action is WriteAction.QUARANTINED and held.memory.key == "location"
    assert await active(service) == [("home_city", "I live in São Paulo")]
    await service.approve(held.memory.id)
    [(key, value)] = await active(service)
    assert key == "location" and value.startswith("I moved to Lisbon")


async def test_import_restating_a_subject_supersedes_it(service: MemoryService) -> None:
    await service.remember(RememberRequest("I live in São Paulo", project=PROJECT_A))
    line = json.dumps({"category": "user", "key": "city", "value": "I live in Lisbon"})
    report = await import_lines(service, [line], project=PROJECT_A, trusted=True)
    assert report.counts == {"superseded": 1}
    assert await active(service) == [("city", "I live in Lisbon")]


async def test_a_quarantined_restatement_supersedes_nothing(service: MemoryService) -> None:
    await service.remember(RememberRequest("my favourite editor is vim", project=PROJECT_A))
    held = await service.save(
        WriteRequest(
            "user", "editor", "my favourite editor is emacs <img src=x onerror=alert(1)>",
            origin="tool", project=PROJECT_A,
        )
    )
    assert held.action is WriteAction.QUARANTINED
    assert await active(service) == [("favourite_editor", "my favourite editor is vim")]


# --- the fast model decides when there is one --------------------------------------------


def answer_judge(fake: FakeOpenAI, answer: dict) -> None:
    """The judgement side call answers ``answer`` (routed by its system prompt)."""
    fake.responder = by_system_prompt({JUDGE_SYSTEM_PROMPT: lambda _body: Reply(json.dumps(answer))})


def judge_requests(fake: FakeOpenAI) -> list[dict]:
    return [
        body for body in fake.chat_requests if body["messages"][0]["content"] == JUDGE_SYSTEM_PROMPT
    ]


async def test_the_fast_model_picks_the_memory_a_note_restates(
    judged: MemoryService, fake: FakeOpenAI
) -> None:
    first = await judged.remember(RememberRequest("my favourite editor is vim", project=PROJECT_A))
    assert judge_requests(fake) == []  # nothing to decide between: no model call
    answer_judge(fake, {"action": "update", "id": first.memory.id})
    result = await judged.remember(RememberRequest("I switched to helix as my editor", project=PROJECT_A))
    [request] = judge_requests(fake)
    assert request["model"] == "test-fast"
    sent = json.loads(request["messages"][1]["content"])
    assert sent["existing"] == [
        {"id": first.memory.id, "category": "user", "key": "favourite_editor",
         "value": "my favourite editor is vim"}
    ]
    assert result.memory.key == "favourite_editor" and result.superseded == [first.memory.id]
    assert await active(judged) == [("favourite_editor", "I switched to helix as my editor")]
    # `memory history` says who decided: the model, though the write was the user's.
    old, new = await history(judged, "favourite_editor", project=PROJECT_A)
    assert (old.replaced_by, old.decided_by) == (result.memory.id, "model"), old.why
    assert new.replaced_by is None


@pytest.mark.parametrize("action", ["update", "noop"])
async def test_a_note_filed_apart_from_the_fact_it_restates_goes_where_that_fact_is(
    judged: MemoryService, fake: FakeOpenAI, action: str
) -> None:
    """The rule may file a restatement on the other side (the person's, the project's)
    from the fact it restates ("Mój projekt nazywa się Alpha" a project fact, "… teraz
    Beta" the person's): the model is shown the closest facts of both sides and its
    choice wins — the note is written where that fact is, under its key, superseding
    (or refreshing) it, not beside it as a second current truth."""
    note = "My project is now called Beta"
    ruled = Category((await judged.writer.file(note, project=PROJECT_A)).category)
    other = Category.PROJECT if ruled is Category.USER else Category.USER
    first = await judged.save(
        WriteRequest(str(other), "project_name", "My project is called Alpha", origin="user", project=PROJECT_A)
    )
    answer_judge(fake, {"action": action, "id": first.memory.id})
    result = await judged.remember(RememberRequest(note, project=PROJECT_A))
    [request] = judge_requests(fake)
    sent = json.loads(request["messages"][1]["content"])
    assert {"id": first.memory.id, "category": str(other), "key": "project_name",
            "value": "My project is called Alpha"} in sent["existing"]
    listed = await judged.list(project=PROJECT_A, statuses=[Status.ACTIVE])
    if action == "noop":
        assert result.action is WriteAction.REFRESHED and result.memory.id == first.memory.id
        assert [(m.category, m.key, m.value) for m in listed] == [(other, "project_name", "My project is called Alpha")]
        return
    assert result.superseded == [first.memory.id] and result.memory.category is other
    assert [(m.category, m.key, m.value) for m in listed] == [(other, "project_name", note)]
    history = [m for m in await judged.list(project=PROJECT_A, statuses=[Status.SUPERSEDED])]
    assert [m.id for m in history] == [first.memory.id]  # restorable, not gone


async def test_a_model_noop_refreshes_the_memory_already_saying_it(
    judged: MemoryService, fake: FakeOpenAI
) -> None:
    first = await judged.remember(RememberRequest("my favourite editor is vim", project=PROJECT_A))
    answer_judge(fake, {"action": "noop", "id": first.memory.id})
    result = await judged.remember(RememberRequest("vim is the editor I like best", project=PROJECT_A))
    assert result.action is WriteAction.REFRESHED and result.memory.id == first.memory.id
    assert await active(judged) == [("favourite_editor", "my favourite editor is vim")]


async def test_an_undecided_pair_is_linked_then_decided_later_by_the_model(
    judged: MemoryService, fake: FakeOpenAI
) -> None:
    """A nonsense or late answer merges nothing: the new fact is linked to the older
    one it may restate, and the idle pass asks again — an update supersedes the older
    (audited, restorable), an add only drops the link."""
    first = await judged.remember(RememberRequest("my favourite editor is vim", project=PROJECT_A))
    fake.script(
        Reply("I think you should update it!"),
        Reply(json.dumps({"action": "update", "id": first.memory.id})),
    )
    nonsense = await judged.save(
        WriteRequest(
            "user", "editor_choice", "helix these days", origin="user", project=PROJECT_A,
            judge_timeout=5.0,
        )
    )
    assert nonsense.action is WriteAction.CREATED and nonsense.memory.restates == first.memory.id
    await judged.consolidated()
    assert len(judge_requests(fake)) == 2
    older = await judged.get(first.memory.id)
    assert older.status is Status.SUPERSEDED and older.superseded_by == nonsense.memory.id
    assert any("decided later by the model" in e.reason for e in await judged.audit(first.memory.id))
    assert (await judged.get(nonsense.memory.id)).restates is None

    gate = threading.Event()
    fake.script(
        Reply(json.dumps({"action": "update", "id": nonsense.memory.id}), gate=gate),
        Reply(json.dumps({"action": "add", "id": None})),
    )
    try:
        late = await judged.save(
            WriteRequest(
                "user", "editor", "kakoune", origin="user", project=PROJECT_A,
                judge_timeout=0.2,
            )
        )
    finally:
        gate.set()
    assert late.action is WriteAction.CREATED and late.memory.restates == nonsense.memory.id
    await judged.consolidated()
    assert len(judge_requests(fake)) == 4
    assert (await judged.get(late.memory.id)).restates is None
    assert len(await active(judged)) == 2
    [unlinked] = [e for e in await judged.audit(late.memory.id) if e.action is AuditAction.UNLINK]
    assert "decided later by the model" in unlinked.reason


async def test_the_model_is_not_asked_when_the_rule_knows_or_nothing_is_related(
    judged: MemoryService, fake: FakeOpenAI
) -> None:
    await judged.remember(RememberRequest("I live in São Paulo", project=PROJECT_A))
    await judged.remember(RememberRequest("my shell is fish", project=PROJECT_A))  # nothing in common
    await judged.remember(RememberRequest("my favourite colour is blue", project=PROJECT_A))
    await judged.remember(RememberRequest("my favourite editor is vim", project=PROJECT_A))  # only "favourite"
    await judged.save(WriteRequest("user", "current_city", "Lives in Porto", origin="tool", project=PROJECT_A,
                      judge_timeout=5.0))  # the rule: same subject as home_city
    await judged.remember(RememberRequest("I moved to Lisbon", project=PROJECT_A))  # the same key
    assert judge_requests(fake) == []
    assert [key for key, _ in await active(judged)] == [
        "shell", "favourite_colour", "favourite_editor", "home_city"
    ]


async def test_another_user_s_fact_of_the_same_subject_is_never_touched(
    service: MemoryService, mem_paths: Paths, clock: Clock
) -> None:
    bob = await MemoryService.open(make_settings("bob"), mem_paths, clock=clock)
    try:
        await bob.remember(RememberRequest("I live in Porto", project=PROJECT_A))
        await service.remember(RememberRequest("I live in São Paulo", project=PROJECT_A))
        moved = await service.save(
            WriteRequest(
                "user",
                "current_city",
                "Lives in Lisbon",
                origin="tool",
                project=PROJECT_A,
            )
        )
        assert moved.superseded != [] and moved.memory.key == "current_city"
        assert await active(bob) == [("home_city", "I live in Porto")]
        assert await active(service) == [("current_city", "Lives in Lisbon")]
    finally:
        await bob.close()


# --- /remember keys name the subject, never the value (issue 24) -------------------------


@pytest.mark.parametrize(
    ("note", "category", "key"),
    [
        ("I prefer short commit messages", "feedback", "preferences"),
        ("I like green tea", "user", "likes"),
        ("I hate long meetings", "user", "dislikes"),
        ("I speak Portuguese and German", "user", "languages"),
        ("I am allergic to cashews", "user", "allergies"),
        ("I am vegetarian", "user", "diet"),
        ("I drive a blue Fiat", "user", "car"),
        ("use ruff for linting", "project", "tool_for_linting"),
        ("prefer pytest over unittest", "feedback", "preference_pytest_unittest"),
        # Nothing the rule can name: a value-free key (the embedder names it by meaning).
        ("answer in Portuguese", "feedback", "note"),
        # Other people's facts are the project's (its team), never the user's.
        ("Keiko prefers meetings after 14:00", "project", "keiko_preferences"),
        ("Tobias: loves rock climbing", "project", "tobias_likes"),
        ("Sven owns the search service", "project", "sven"),
        ("Dario: allergic to shellfish", "project", "dario_allergies"),
        ("Priya: on vacation until May", "project", "priya"),
        ("Radek: +44 20 7946 0104", "project", "radek_phone"),
        ("Caroline: I moved to Berlin last week", "project", "caroline"),  # her turn, not yours
        ("Marta is my sister and lives in Braga", "user", "marta"),  # family, not the team
        ("Lucía es mi vecina", "user", "lucia"),
        ("the standup is at 9:30", "project", "standup"),
    ],
)
def test_a_note_s_key_names_its_subject_not_its_value(note: str, category: str, key: str) -> None:
    filed = file_note(note)
    assert (filed.category.value, filed.key) == (category, key)


async def test_two_likes_are_two_memories_and_a_time_is_not_a_label(service: MemoryService) -> None:
    tea = await service.remember(RememberRequest("I like green tea", project=PROJECT_A, judge_timeout=None))
    hiking = await service.remember(RememberRequest("I like hiking in the Gerês", project=PROJECT_A, judge_timeout=None))
    assert (tea.memory.key, hiking.memory.key) == ("likes", "likes_2") and hiking.superseded == []
    meet = await service.remember(RememberRequest("Keiko prefers meetings after 14:00", project=PROJECT_A, judge_timeout=None))
    assert meet.memory.key == "keiko_preferences" and meet.memory.category is Category.PROJECT


def test_a_note_s_key_read_by_meaning_never_keeps_a_neighbour_from_the_model() -> None:
    """A /remember note's key was only read from its words (by meaning, a guess the
    model is there to check): "Ich habe zu SAP gewechselt" read as a home city is still
    asked about "Ich bin bei Bosch angestellt" filed as the employer. Keys a writer
    named are its evidence: two attributes the vocabulary knows apart stay apart."""
    older = memory(1, "employer", "Ich bin bei Bosch angestellt")
    found = [Candidate(older, 1.0, 0.91, None, 0.0)]
    note = by_meaning("home_city", "Ich habe zu SAP gewechselt", Category.USER, found, 0.81, explicit=False)
    named = by_meaning("home_city", "Ich habe zu SAP gewechselt", Category.USER, found, 0.81)
    assert [m.id for m in note] == [1] and named == []
