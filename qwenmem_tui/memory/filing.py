"""Where a /remember note is filed, by the fast model's validated choice.

The rule (``identity.category_of``) files a note by its words: project words and other
people make a project memory, rules and preferences feedback, family, friends and the
rest the person's own. Words mislead it ("Dario is allergic to peanuts" may be about
the person's son, not a colleague), so where the fast model is already asked on the
write path — the identity judgement (``identity.JUDGE_SYSTEM_PROMPT``) — it also says
where the new fact belongs, in the same answer: no extra call, so a write costs no
more model time than before. The answer is data: only one of the four categories with
the scope that category lives in is accepted (``user``/``feedback`` in every project,
``project``/``reference`` in this project only); anything else — missing, unknown,
inconsistent — leaves the rule's choice, and the note is stored either way.
"""

from __future__ import annotations

from qwenmem_tui.memory.model import GLOBAL_CATEGORIES, Category
from qwenmem_tui.llm.json_answer import json_object

SCOPE_GLOBAL = "global"  # every project: the person's own facts and preferences
SCOPE_PROJECT = "project"  # this project only

FILING_GUIDE = """- "user": a fact about the person themselves or their own life (where they live, \
their family and friends, their own tools) — scope "global", every project;
- "feedback": how the person wants the assistant to work (answer style, coding \
rules, preferences about its replies) — scope "global";
- "project": a fact about the current project — its code, build, services, hosts, \
files, decisions, or the people on its team and what they own — scope "project", \
this project only;
- "reference": where something is found (a URL, a document, a dashboard, a ticket \
board) — scope "project"."""


def scope_kind(category: Category) -> str:
    """``global`` or ``project``: where a memory of ``category`` lives."""
    return SCOPE_GLOBAL if category in GLOBAL_CATEGORIES else SCOPE_PROJECT


def parse_filing(raw: str) -> Category | None:
    """The model's category, or None when the answer names none or is not a valid,
    consistent choice (the caller keeps the rule's). A scope that contradicts the
    category (``user`` in this project only) is not a choice the store can honour:
    refused, not guessed."""
    data = json_object(raw)
    if data is None or not isinstance(data.get("category"), str):
        return None
    try:
        category = Category(data["category"].strip().casefold())
    except ValueError:
        return None
    scope = data.get("scope")
    if scope is not None and (
        not isinstance(scope, str) or scope.strip().casefold() != scope_kind(category)
    ):
        return None
    return category
