"""Reading a subject from text: what a fact is about, in the languages the rule reads.

The fast path of fact identity (``identity.py`` decides; this module reads). What a
fact is about is read into a ``Subject``: the *entity* it describes (the user, the
project, a named person or service, a TODO list, a speaker's turn) and the
*attribute* it gives a value for (home city, editor, phone, manager, a setting), with
whether that attribute holds one value at a time. Hand-written English, Portuguese and
Spanish patterns read it; they are a fast path for what they know and never the gate
for anything else: a fact they cannot read is read by meaning (``meaning.py``) and
judged by the model (``judge.py``).

``restates`` is the rule: both facts name the same entity and the same single-valued
attribute ("I live in Lisbon" after "eu moro em São Paulo"; "Carol's manager is Erin"
after "Carol's manager: Dave"). ``contradicts`` is evidence that two facts are
different subjects (list items, speaker turns, two attributes the vocabulary knows),
whatever a model says.

``file_note`` files a ``/remember`` note by rule: category (project facts — services,
hosts, files, the team — are project memories) and a key naming the subject
("home_city", "ana_birthday", "staging_server"), never the value; a note whose subject
it cannot name gets the value-free key ``note`` and is read by meaning instead.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from qwenmem_tui.memory.model import Category

_WORD = re.compile(r"[a-z0-9]+")

# Leading words that are about the act of noting, not the fact.
_PREAMBLE = re.compile(
    r"^\s*(?:(?:please\s+)?remember(?:\s+that)?|note\s+that|fyi|actually|in fact|"
    r"na verdade|lembre(?:-se)?(?:\s+que)?|lembra(?:\s+que)?|anota(?:\s+que)?|"
    r"en realidad|recuerda(?:\s+que)?|de hecho)\s*[:,]?\s+",
    re.IGNORECASE,
)

# -- predicates that name a single-valued attribute, whoever the entity is -----------
_PREDICATES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "city",
        re.compile(
            r"^(?:(?:now|currently|still|also)\s+)?(?:lives?|live|resides?|is\s+based|am\s+based|"
            r"am\s+living|is\s+living|(?:has\s+|have\s+)?(?:just\s+|recently\s+|finally\s+)?"
            r"(?:moved|relocated)(?:\s+back)?)\s+(?:in|to)\s+\S"
            r"|^(?:agora\s+|ainda\s+)?(?:mora|moro|vive|vivo|reside|resido)\s+(?:em|no|na|nos|nas)\s+\S"
            r"|^(?:se\s+|me\s+)?mud(?:ou|ei)(?:-se|-me)?\s+(?:para|pra|pro)\s+\S"
            r"|^(?:ahora\s+|todav[ií]a\s+)?(?:vive|vivo|reside|resido)\s+en\s+\S"
            r"|^(?:se\s+|me\s+)(?:ha\s+|he\s+)?mud(?:ó|o|é|e|ado)\s+(?:a|para)\s+\S",
            re.IGNORECASE,
        ),
    ),
    (
        "employer",
        re.compile(
            r"^(?:(?:now|currently)\s+)?(?:works?|am\s+working|is\s+working)\s+(?:at|for)\s+\S"
            r"|^(?:agora\s+)?(?:trabalha|trabalho)\s+(?:na|no|em|para|pra)\s+\S"
            r"|^(?:ahora\s+)?(?:trabaja|trabajo)\s+(?:en|para)\s+\S",
            re.IGNORECASE,
        ),
    ),
    (
        "name",
        re.compile(
            r"^(?:is\s+called|goes\s+by|se\s+chama|me\s+chamo|se\s+llama|me\s+llamo)\s+\S",
            re.IGNORECASE,
        ),
    ),
    (
        "manager",
        re.compile(r"^(?:now\s+)?reports?\s+to\s+\S|^(?:se\s+)?reporta\s+(?:a|para)\s+\S", re.IGNORECASE),
    ),
    (
        "owner",
        re.compile(
            r"^(?:is\s+)?(?:now\s+)?(?:owned|maintained|run)\s+by\s+\S"
            r"|^(?:[ée]\s+)?(?:agora\s+)?mantido\s+(?:por|pela|pelo)\s+\S"
            r"|^(?:es\s+)?(?:ahora\s+)?mantenido\s+por\s+\S",
            re.IGNORECASE,
        ),
    ),
)
# The key a predicate's attribute is filed under by /remember.
_KEYS = {"city": "home_city"}
# A third-person verb opening what is said of a named label ("Ana: prefers …").
_VERB_FIRST = re.compile(
    r"^(?:[a-z]+s|is|has|was|will|can|does|owned|leads|prefere|trabalha|mora|vive|gosta|"
    r"lidera|prefiere|trabaja|le\s+gusta|usa|quer|quiere)\b"
)
_FIRST_PERSON_PREDICATE = re.compile(
    r"^(?:i(?:'m|'ve|\s+am|\s+have)?|eu|yo)\s+(?P<rest>.+)$", re.IGNORECASE
)
_CALL_ME = re.compile(r"^(?:call\s+me|(?:eu\s+)?me\s+chamo|(?:yo\s+)?me\s+llamo)\s+\S", re.IGNORECASE)
_DEPLOYS = re.compile(
    r"^(?:we\s+|this\s+project\s+|the\s+project\s+|it\s+)?(?:now\s+)?(?:deploy(?:s|ed)?|ships?)"
    r"(?:\s+go(?:es)?)?\s+(?:to|on)\s+\S"
    r"|^deploys\s+go\s+to\s+\S"
    r"|^(?:n[óo]s\s+)?(?:agora\s+)?(?:faz|fazemos)\s+(?:o\s+)?deploy\s+(?:em|no|na|para)\s+\S"
    r"|^(?:ahora\s+)?(?:hacemos|desplegamos)\s+(?:el\s+)?(?:deploy\s+)?(?:en|a)\s+\S",
    re.IGNORECASE,
)
# "we use X for Y": the subject is what X is used for.
_USE_FOR = re.compile(
    r"^(?:(?:we|i)\s+)?(?:now\s+)?(?:use|are\s+using|switched\s+to)\s+.+?\s+(?:for|to)\s+(?P<s>.+)$"
    r"|^(?:n[óo]s\s+)?(?:agora\s+)?usamos\s+.+?\s+(?:para|pra)\s+(?P<pt>.+)$"
    r"|^(?:nosotros\s+)?(?:ahora\s+)?usamos\s+.+?\s+para\s+(?P<es>.+)$",
    re.IGNORECASE,
)
# "I prefer X over Y": one subject whichever way round, the choice between X and Y.
_PREFER = re.compile(
    r"^(?:(?:i\s+)?(?:still\s+|now\s+)?prefer|(?:eu\s+)?prefiro|(?:yo\s+)?prefiero|"
    r"(?:s?he\s+)?prefers|prefere|prefiere)\s+(?P<a>.+?)\s+"
    r"(?:over|to|rather\s+than|instead\s+of|em\s+vez\s+de|ao\s+inv[ée]s\s+de|en\s+vez\s+de|a|ao|à)\s+"
    r"(?P<b>.+?)[.!]?$",
    re.IGNORECASE,
)
# A rule's polarity is its value: "never use emojis" and "always use emojis" are one
# subject (using emojis), so the newer rule replaces the older.
_RULE = re.compile(
    r"^(?:please\s+)?(?:always|never|don'?t|do\s+not|stop|avoid|nunca|sempre|siempre|"
    r"n[ãa]o|no|por\s+favor|evite|evita)\b",
    re.IGNORECASE,
)
_POLARITY = frozenset(
    "always never don t do not please stop avoid nunca sempre siempre nao no por favor "
    "evite evita".split()
)
# "X is Y" (and its translations), "X: Y", "X = Y": X is what is described.
_COPULA = re.compile(
    r"^(?P<s>[^:=\n]{1,60}?)\s+(?:is|are|was|=|é|es|est|ist|são|son|fica\s+em|está\s+em|"
    r"has\s+moved\s+to|changed\s+to|mudou\s+para|cambi[óo]\s+a)\s+(?P<v>\S.*)$",
    re.IGNORECASE,
)
# A colon between digits is a time ("after 14:00"), not a label's.
_COLON = re.compile(r"^(?P<s>[^:=\n]{1,60}?)\s*(?<!\d)[:=](?!\d)\s*(?P<v>\S.*)$", re.DOTALL)
_POSSESSIVE = re.compile(r"^(?P<e>[\w][\w .-]{0,40}?)'s\s+(?P<a>.+)$", re.IGNORECASE)
# "the manager of Carol", "o gerente da Carol", "el jefe de Carol"
_OF = re.compile(
    r"^(?P<a>.+?)\s+(?:of|d[oa]s?|de|del)\s+(?P<e>[A-ZÀ-Ý][\w-]*(?:\s+[A-ZÀ-Ý][\w-]*)?)$"
)

# Verbs that relate a person to one of many things: the key names the relation
# ("likes"), never the thing ("like_green_tea" would carry the value). Each one is its
# own memory (a second like is not a new value of the first).
_RELATIONS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE))
    for name, pattern in (
        ("likes", r"^(?:really\s+|also\s+)?(?:like|likes|love|loves|enjoy|enjoys|adore|adores)\b"),
        ("dislikes", r"^(?:really\s+)?(?:hate|hates|dislike|dislikes|can'?t\s+stand|cannot\s+stand)\b"),
        ("preferences", r"^(?:still\s+|now\s+|usually\s+)?(?:prefer|prefers)\b"),
        ("languages", r"^(?:speak|speaks)\b"),
        ("allergies", r"^(?:(?:am|is)\s+)?allergic\s+to\b"),
        ("diet", r"^(?:(?:am|is)\s+)?(?:a\s+)?(?:vegetarian|vegan|pescatarian)\b"),
        ("car", r"^(?:drive|drives)\s+(?:a|an|the)\b"),
    )
)


def _relation(entity: str, rest: str) -> Subject | None:
    """The many-valued relation ``rest`` states of ``entity`` ("likes green tea")."""
    for name, pattern in _RELATIONS:
        if pattern.match(rest.strip()):
            return Subject(entity, name, False, name)
    return None


# Words at the front of a phrase that do not name it.
_DETERMINERS = frozenset(
    "the my our your his her their a an this that these those its "
    "o os as meu minha meus minhas nosso nossa nossos nossas seu sua "
    "el la los las mi mis nuestro nuestra nuestros nuestras su sus "
    "le les mon ma mes notre der die das mein meine unser unsere".split()
)
_FIRST_PERSON = frozenset("my mine i me meu minha meus minhas eu mi mis yo mio mia".split())
_WE = frozenset("our we nosso nossa nossos nossas nuestro nuestra nuestros nuestras".split())
# Words translated to one language, so "meu editor favorito" and "my favourite editor"
# name one attribute; synonyms collapse the same way.
_LEXICON = {
    "favorite": "favourite", "favorito": "favourite", "favorita": "favourite",
    "preferred": "favourite", "preferido": "favourite", "preferida": "favourite",
    "atual": "current", "actual": "current",
    "cidade": "city", "ciudad": "city", "location": "city", "residence": "city",
    "hometown": "city", "home": "city", "lives": "city", "live": "city",
    "projeto": "project", "projecto": "project", "proyecto": "project",
    "nome": "name", "nombre": "name",
    "linguagem": "language", "lenguaje": "language", "idioma": "language", "lingua": "language",
    "empresa": "employer", "company": "employer", "job": "employer", "trabalho": "employer",
    "trabajo": "employer", "workplace": "employer",
    "servidor": "server", "alvo": "target", "destino": "target", "deployment": "deploy",
    "versao": "version", "cor": "colour", "color": "colour",
    "equipe": "team", "equipo": "team",
    "banco": "database", "db": "database",
    "telefone": "phone", "telefono": "phone", "celular": "phone", "mobile": "phone",
    "number": "phone", "numero": "phone",
    "gerente": "manager", "jefe": "manager", "chefe": "manager", "boss": "manager",
    "jefa": "manager", "chefa": "manager",
    "aniversario": "birthday", "cumpleanos": "birthday",
    "correo": "email", "mail": "email",
    "fuso": "timezone", "horario": "timezone", "zona": "timezone", "tz": "timezone",
    "dono": "owner", "dona": "owner", "responsavel": "owner", "responsable": "owner",
    "papel": "role", "cargo": "role", "funcao": "role", "position": "role", "title": "role",
    "prazo": "deadline", "plazo": "deadline",
    "tema": "theme", "fonte": "font", "fuente": "font",
    "navegador": "browser", "porta": "port", "puerto": "port",
    "ramo": "branch", "rama": "branch",
}
# Words that qualify an attribute without changing it: "current_city" is "city",
# "favourite_editor" is "editor", "user_name" is "name".
_QUALIFIERS = frozenset(
    "current now new latest present actual favourite main default primary user users "
    "my mine our s de do da del of the".split()
)
_LEADING = frozenset({"favourite", "current"})
# Attributes that hold one value at a time: a new value replaces the old one.
_SINGLE = frozenset(
    "city employer name nickname age birthday email phone timezone manager role editor "
    "shell theme font browser os ide terminal keyboard layout language target server host "
    "hostname port url domain database branch version codename owner lead deadline budget "
    "address partner wife husband spouse salary colour team stack framework runtime "
    "model provider plan status editor_theme password_manager".split()
)
# Heads that are lists: each one is its own memory whatever its wording.
_LISTS = frozenset(
    "todo todos task tasks note notes nota notas decision decisions decisao decision "
    "decisiones meeting meetings reuniao reunion idea ideas reminder lembrete recordatorio "
    "tarefa tarea bug bugs issue issues question pergunta pregunta log update action item "
    "fact fato hecho code review comment quote incident minute minutes standup retro "
    "dica tip tips event evento entry".split()
)
# Relations a person has many of: "my sister is Ana" does not replace "my sister is Bea".
_MULTI = frozenset(
    "sister brother friend colleague child kid son daughter pet dog cat hobby hobbies "
    "allergy allergies skill skills cousin uncle aunt neighbour neighbor client customer "
    "irma irmao amigo amiga colega filho filha hermana hermano hijo hija".split()
)
_CONNECTORS = frozenset("of de do da dos das del".split())
_VERBS_SHORT = re.compile(r"^(?:is|are|was|has|have|had|does|did|will|can|likes?|loves?|hates?)$")

MAX_SUBJECT_WORDS = 5
MAX_LEADING_WORDS = 3  # time words before a possessive: "hoje em dia meu …"
KEY_CHARS = 48
SHORT_VALUE_WORDS = 4


def fold(text: str) -> str:
    """Lower case ASCII: keys are ASCII snake_case, so "São" and "sao" are one word."""
    if text.isascii():  # most text; an import's every line folds its neighbours'
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def words(text: str) -> list[str]:
    return _WORD.findall(fold(text))


def _as_key(tokens: Sequence[str]) -> str | None:
    key = "_".join(t for t in tokens if t)[:KEY_CHARS].strip("_")
    if not key:
        return None
    return key if key[0].isalpha() else "note_" + key


def _after_possessive(tokens: list[str]) -> list[str]:
    """The phrase after a first person's possessive a few words in, when nothing joins
    those words to it: "now my favourite colour", "hoje em dia meu editor" name
    "favourite colour" and "editor" (the time words before were in the key, and kept
    a restatement from its fact); "the manager of my team" is left whole."""
    for i, token in enumerate(tokens[1:MAX_LEADING_WORDS + 1], start=1):
        if token in _FIRST_PERSON and token in _DETERMINERS:
            if not any(t in _CONNECTORS for t in tokens[:i]):
                return tokens[i + 1 :]
            break
    return tokens


def _phrase(text: str) -> list[str] | None:
    """A noun phrase's words, determiners dropped and translated, leading adjectives
    first as English has them; None when it does not read as a short phrase."""
    if re.search(r"[,;!?()\[\]{}\"/\\]|https?|\d{3,}", text):
        return None
    tokens = _after_possessive(words(text))
    while tokens and tokens[0] in _DETERMINERS:
        tokens = tokens[1:]
    if not tokens or len(tokens) > MAX_SUBJECT_WORDS:
        return None
    translated = [_LEXICON.get(t, t) for t in tokens]
    moved = [t for t, src in zip(translated, tokens, strict=True) if t in _LEADING and t != src]
    rest = [t for t, src in zip(translated, tokens, strict=True) if not (t in _LEADING and t != src)]
    return moved + rest


def canonical(phrase: Sequence[str]) -> str:
    """An attribute's comparable form: translated words without qualifiers, so
    "current_city", "home_city" and "cidade" are all "city"."""
    named = [_LEXICON.get(t, t) for t in phrase if t]
    kept = [t for t in named if t not in _QUALIFIERS] or named
    # "home_city" translates to "city city": one word.
    return "_".join(t for i, t in enumerate(kept) if i == 0 or t != kept[i - 1])


def single_valued(attribute: str) -> bool:
    """Whether ``attribute`` holds one value at a time (a new value replaces the old)."""
    head = attribute.rsplit("_", 1)[-1]
    if head in _MULTI or head in _LISTS:
        return False
    return (
        head in _SINGLE
        or attribute.startswith(("preference:", "rule:", "tool_for_"))
        or attribute in _SINGLE
    )


@dataclass(frozen=True)
class Subject:
    """What a fact is about: ``entity`` ("user", "project", a folded name, "list:todo",
    "turn:caroline") and ``attribute`` (canonical, None when unknown); ``single``: the
    attribute holds one value at a time, so a new value replaces the old one."""

    entity: str
    attribute: str | None = None
    single: bool = False
    keyable: str | None = None  # the key words /remember files the note under
    from_key: bool = False  # read from the key alone (the value states no subject)
    # A sentence's first word taken for a name, no third person's verb after it
    # ("Ich bin Fan von…", "Curro en…", "Atualmente moro em…"): a pronoun, a verb or
    # an adverb as often as a name.
    guessed: bool = False

    @property
    def is_list(self) -> bool:
        return self.entity.startswith(("list:", "turn:"))


SELF = "self"  # the memory's owner by category: the user, or the project


def _entity_name(text: str) -> str | None:
    """A named entity ("Ana", "the billing service", "Carol Smith") as a folded name."""
    phrase = _phrase(text)
    if phrase is None or len(phrase) > 3:
        return None
    if phrase[0] in _FIRST_PERSON or phrase[0] in ("user", "usuario", "usuaria"):
        return "user"
    if phrase[0] in _WE:
        return "project"
    return "_".join(phrase)


def _predicate(entity: str, rest: str) -> Subject:
    """The attribute a predicate gives ``entity`` a value for ("lives in Madrid")."""
    for attribute, pattern in _PREDICATES:
        if pattern.search(rest):
            return Subject(entity, attribute, True, _KEYS.get(attribute, attribute))
    preferred = _PREFER.match(rest)
    if preferred:
        return _preference(entity, preferred)
    stated = _COPULA.match(rest) or _COLON.match(rest)
    if stated:  # "Ana: manager is Dave", "Ana: phone 555" is not caught, stays unknown
        phrase = _phrase(stated.group("s"))
        if phrase is not None and phrase[0] not in _FIRST_PERSON and not _VERBS_SHORT.match(phrase[-1]):
            attribute = canonical(phrase)
            return Subject(entity, attribute, single_valued(attribute), "_".join(phrase))
    return _relation(entity, rest) or Subject(entity)


def _preference(entity: str, found: re.Match[str]) -> Subject:
    a, b = _phrase(found.group("a")), _phrase(found.group("b"))
    if a is None or b is None:
        return Subject(entity)
    pair = sorted(("_".join(a), "_".join(b)))
    return Subject(entity, "preference:" + "|".join(pair), True, "_".join(["preference", *pair]))


def _first_person(body: str) -> Subject | None:
    """Facts the person states about themselves ("I live in …", "I prefer …")."""
    if _CALL_ME.search(body):
        return Subject("user", "name", True, "name")
    preferred = _PREFER.match(body)
    if preferred:
        return _preference("user", preferred)
    found = _FIRST_PERSON_PREDICATE.match(body)
    if found:
        rest = found.group("rest")
        for attribute, pattern in _PREDICATES:
            if pattern.search(rest):
                return Subject("user", attribute, True, _KEYS.get(attribute, attribute))
        return _relation("user", rest) or Subject("user")
    # Portuguese and Spanish drop the pronoun: "moro em Lisboa", "vivo en Madrid".
    for attribute, pattern in _PREDICATES:
        if pattern.search(body) and _PRO_DROP.match(body):
            return Subject("user", attribute, True, _KEYS.get(attribute, attribute))
    return None


_PRO_DROP = re.compile(
    r"^(?:agora\s+|ainda\s+|ahora\s+|todav[ií]a\s+)?(?:moro|vivo|resido|mudei|me\s|trabalho|trabajo)", re.IGNORECASE
)


def _entity_attribute(found: re.Match[str]) -> Subject | None:
    """The subject of a match naming an entity (``e``) and its attribute (``a``):
    "Carol's manager", "the manager of Carol"."""
    entity, attr = _entity_name(found.group("e")), _phrase(found.group("a"))
    if entity is None or attr is None:
        return None
    attribute = canonical(attr)
    return Subject(entity, attribute, single_valued(attribute), f"{entity}_{'_'.join(attr)}")


def _labelled(label: str, rest: str) -> Subject | None:
    """"Label: rest" — a list item, a speaker's turn, an attribute or an entity."""
    tokens = words(label)
    if not tokens or len(tokens) > MAX_SUBJECT_WORDS:
        return None
    if tokens[0] in _LISTS or "_".join(tokens) in ("code_review", "action_item"):
        return Subject("list:" + "_".join(tokens))
    possessive = _POSSESSIVE.match(label.strip())
    found = _entity_attribute(possessive) if possessive else None  # "Carol's manager: Dave"
    if found is not None:
        return found
    phrase = _phrase(label)
    if phrase is None:
        return None
    attribute = canonical(phrase)
    # "Serviço de email": the head is the word before "de", not the last one.
    joined = next((i for i, t in enumerate(phrase) if t in _CONNECTORS), len(phrase))
    known = single_valued(canonical(phrase[:joined] or phrase))
    name_first = re.match(r"^([A-ZÀ-Ý][\w-]+)\s+\S", rest)
    if known and name_first and len(phrase) == 1:
        # "Phone: Alice 555-0101" — Alice's phone, not the phone.
        entity = fold(name_first.group(1))
        return Subject(entity, attribute, True, f"{entity}_{'_'.join(phrase)}")
    if known:
        return Subject(SELF, attribute, True, "_".join(phrase))
    capitalised = label.strip()[:1].isupper() and len(tokens) <= 3
    if capitalised and re.match(r"^(?:i|i'm|i've|my|me|we|eu|meu|minha|yo|mi)\b", rest, re.IGNORECASE):
        return Subject("turn:" + "_".join(tokens))  # "Caroline: I moved …": what was said
    if capitalised and (_VERB_FIRST.match(rest) or _known_thing(tokens)):
        return _predicate("_".join(phrase), rest)  # "Ana: prefers …", "Billing service: …"
    if capitalised and len(tokens) == 1 and _PHONE_ONLY.match(rest.strip()):
        return Subject(tokens[0], "phone", True, f"{tokens[0]}_phone")  # "Radek: +44 20 …"
    if capitalised and len(tokens) == 1 and _SAID_OF_A_PERSON.match(rest):
        return _predicate(tokens[0], rest)  # "Dario: allergic to shellfish": Dario's
    return Subject(SELF, attribute, False, "_".join(phrase))


# What is said of a person after "Name:" without a verb: a state, a place, a role.
_SAID_OF_A_PERSON = re.compile(
    r"^(?:allergic|on\s+(?:vacation|holiday|leave|call|parental)|out\s+(?:sick|of\s+office)|"
    r"off\s+(?:on|until|sick)|away\s+until|back\s+(?:on|from|in)|based\s+in|from\s+[A-ZÀ-Ý]|"
    r"lives\s+in|married|pregnant|joining|leaving|new\s+(?:on|in|to)|responsible\s+for|"
    r"(?:the\s+)?(?:owner|lead|head|manager|maintainer)\s+of|em\s+f[ée]rias|de\s+vacaciones|"
    r"al[ée]rgic[oa])\b",
    re.IGNORECASE,
)
_PHONE_ONLY = re.compile(r"^\+?\d[\d\s().-]{6,}\d$")


def _known_thing(tokens: Sequence[str]) -> bool:
    return any(t in ("service", "server", "api", "app", "team", "repo", "project") for t in tokens)


def statement(text: str) -> Subject | None:
    """The subject ``text`` states, when it is in a recognisable form; else None."""
    body = _PREAMBLE.sub("", text.strip(), count=1).strip()
    if not body:
        return None
    mine = _first_person(body)
    if mine is not None:
        return mine
    if _DEPLOYS.search(body):
        return Subject(SELF, "deploy_target", True, "deploy_target")
    used = _USE_FOR.match(body)
    if used:
        group = next(g for g in ("s", "pt", "es") if used.group(g))
        phrase = _phrase(used.group(group))
        if phrase is not None:
            return Subject("project", "tool_for_" + canonical(phrase), True, "tool_for_" + "_".join(phrase))
    if _RULE.match(body):
        kept = [w for w in words(body) if w not in _POLARITY and w not in _KEY_STOP][:4]
        if kept:
            return Subject("user", "rule:" + "_".join(kept), True, "_".join(kept))
    colon = _COLON.match(body)
    if colon and not re.match(r"^https?$", colon.group("s").strip(), re.IGNORECASE):
        labelled = _labelled(colon.group("s"), colon.group("v"))
        if labelled is not None:
            return labelled
    possessive = _POSSESSIVE.match(body)
    if possessive:
        entity = _entity_name(possessive.group("e"))
        inner = _COPULA.match(possessive.group("a"))
        if entity is not None and inner is not None:
            attr = _phrase(inner.group("s"))
            if attr is not None:
                attribute = canonical(attr)
                return Subject(entity, attribute, single_valued(attribute), f"{entity}_{'_'.join(attr)}")
    for attribute, pattern in _PREDICATES:  # "Lives in Lisbon": the owner's
        if pattern.search(body):
            return Subject(SELF, attribute, True, _KEYS.get(attribute, attribute))
    copula = _COPULA.match(body)
    if copula:
        return _copula(copula.group("s"), copula.group("v"))
    named = re.match(r"^(?:the\s+)?(?P<e>[A-ZÀ-Ý][\w-]*(?:\s+(?:service|server|team|api|app))?)\s+(?P<r>.+)$", body)
    if named:
        entity = _entity_name(named.group("e"))
        if entity is not None and entity not in ("user", "project"):
            rest = named.group("r")
            said = _predicate(entity, rest)
            # Neither a third person's verb after it nor something said of someone
            # ("moved to Milan"): a guess. The rule's languages drop the pronoun
            # ("Atualmente moro em…"), others open with it ("Ich bin…", "Je…").
            if _VERB_FIRST.match(rest) or (said.attribute is not None and not _PRO_DROP.match(rest)):
                return said
            return replace(said, guessed=True)
    user = re.match(r"^(?:the\s+)?user\s+(?P<r>.+)$", body, re.IGNORECASE)
    if user:
        return _predicate("user", user.group("r"))
    return None


# A copula's value that is the person's own something ("… is my main language",
# "… ist mein Editor", "… is where I live"): what is said first is then the value.
_OWN_VALUE = re.compile(
    r"^(?:my|meu|minha|mi|mein|meine|ma|mon|mijn|mio|mia|il\s+mio|la\s+mia|"
    r"where|what|onde|donde|où|wo|dove|waar)\b",
    re.IGNORECASE,
)

# Who someone can be to the person: "Carlos es mi jefe" is about Carlos.
_PEOPLE = _MULTI | frozenset("manager partner wife husband spouse owner lead".split())


def _value_first(value: str) -> bool:
    """Whether "X is <value>" said the value first: the value is the person's own
    thing, not someone they know ("Rust is my main language", not "Carlos es mi jefe")."""
    if not _OWN_VALUE.match(value.strip()):
        return False
    said = _phrase(value)
    return not (said and any(t in _PEOPLE for t in said))


def _copula(subject: str, value: str) -> Subject | None:
    """"X is Y": X an attribute of the user ("my editor"), of someone ("the manager of
    Carol"), or of the owner ("the deploy target")."""
    of = _OF.match(subject.strip())
    found = _entity_attribute(of) if of else None
    if found is not None:
        return found
    phrase = _phrase(subject)
    if phrase is None:
        return None
    first = words(subject)[:1]
    entity = SELF
    if first and first[0] in _FIRST_PERSON:
        entity = "user"
    elif first and first[0] in _WE:
        entity = "project"
    elif subject[:1].isupper() and len(phrase) <= 2 and first and first[0] not in _DETERMINERS:
        # "Ana is the backend lead": about Ana, what of her unknown. "Rust is my main
        # language", "Lisbon is where I live": the value said first, only a guess at a
        # name (never the key).
        if not any(t in _SINGLE for t in phrase):
            return Subject("_".join(phrase), guessed=_value_first(value))
    attribute = canonical(phrase)
    if phrase in (["user"], ["project"]):
        return Subject(phrase[0])
    definite = bool(first) and first[0] in _DETERMINERS | _FIRST_PERSON
    single = single_valued(attribute) or (definite and phrase[-1] not in _MULTI | _LISTS)
    return Subject(entity, attribute, single, "_".join(phrase))


_KEY_STOP = frozenset(
    "i im i'm my me the a an is are am to of and that this for in on be please "
    "remember".split()
)


@lru_cache(maxsize=4096)
def about(key: str, value: str) -> Subject:
    """What a stored fact is about: its value's stated subject, else its key's.

    Cached (a Subject is frozen): a write reads each of its neighbours this way, and
    a bulk import meets the same neighbours line after line."""
    stated = statement(value)
    key_words = [w for w in key.split("_") if w]
    if stated is not None and stated.attribute is None and not stated.is_list and key_words:
        # "Ana leads the backend team" under "ana_role": the key names the attribute.
        entity_words = stated.entity.split("_")
        if key_words[: len(entity_words)] == entity_words and len(key_words) > len(entity_words):
            attribute = canonical(key_words[len(entity_words) :])
            return Subject(stated.entity, attribute, single_valued(attribute), key)
        if stated.entity != SELF and stated.entity.split("_")[0] not in key_words:
            # A bare name the key does not carry: in a language the rule does not read,
            # a first word taken for a name ("Projekt Alpha, Stack TypeScript" under
            # "current_project"). The writer's key says what the fact is about.
            stated = None
    if stated is not None and (stated.attribute is not None or stated.is_list or stated.entity != SELF):
        return stated
    attribute = canonical(key_words)
    short = len(words(value)) <= SHORT_VALUE_WORDS
    return Subject(SELF, attribute, single_valued(attribute) or short, key, from_key=True)


def _owner(entity: str, category: Category) -> str:
    if entity != SELF:
        return entity
    return "project" if category in (Category.PROJECT, Category.REFERENCE) else "user"


def same_entity(a: Subject, b: Subject, category: Category) -> bool:
    return _owner(a.entity, category) == _owner(b.entity, category)


def restates(a: Subject, b: Subject, category: Category) -> bool:
    """The rule: the same entity's same single-valued attribute."""
    return (
        not a.is_list
        and not b.is_list
        and a.attribute is not None
        and a.attribute == b.attribute
        and a.single
        and b.single
        and same_entity(a, b, category)
    )


def contradicts(a: Subject, b: Subject) -> bool:
    """Evidence that two facts are different subjects, whatever a model says."""
    if a.is_list or b.is_list:
        return True
    if a.attribute is None or b.attribute is None or a.attribute == b.attribute:
        return False
    if single_valued(a.attribute) and single_valued(b.attribute):
        return True  # two attributes the vocabulary knows ("birthday", "role")
    if a.from_key and b.from_key:
        # Two keys naming bare values that share a word and differ in another
        # ("billing_service_enabled", "auth_service_enabled"): two things' values.
        x, y = set(a.attribute.split("_")), set(b.attribute.split("_"))
        return bool(x & y) and bool(x - y) and bool(y - x)
    return False


# -- /remember ---------------------------------------------------------------------------

_PROJECT_WORDS = re.compile(
    r"\b(project|repo|repository|codebase|this code|build|tests?|deploy\w*|ci|pipeline|"
    r"server|servers|host|hostname|staging|production|prod|service|services|database|db|"
    r"endpoint|api|port|branch|cluster|bucket|domain|config|file|files|team|sprint|release|"
    r"standup|retro|on-?call|incident|runbook|roadmap|backlog|code review|"
    r"projeto|proyecto|reposit[óo]rio|repositorio|servidor|servi[çc]o|servicio|equipe|equipo|"
    r"banco de dados|base de datos|arquivo|archivo)\b",
    re.IGNORECASE,
)


# A note that opens by telling the assistant how to answer.
_ADDRESSED = re.compile(
    r"^\s*(?:answer|reply|respond|write|explain|summari[sz]e|talk\s+to\s+me|address\s+me|"
    r"responda|responde|escreva|escribe|explica|explique)\b"
)


_KIN_WORDS = (
    r"(?:sister|brother|wife|husband|partner|girlfriend|boyfriend|mother|father|mom|mum|dad|"
    r"son|daughter|child|kid|cousin|aunt|uncle|niece|nephew|grandmother|grandfather|"
    r"friend|neighbou?r|flatmate|roommate|godmother|godfather|"
    r"irmã|irmão|esposa|marido|namorada|namorado|mãe|pai|filha|filho|prima|primo|tia|tio|amiga|amigo|vizinha|vizinho|"
    r"hermana|hermano|mujer|madre|padre|hija|hijo|tía|tío|vecina|vecino)"
)
# Someone named as the person's family or friend ("Marta is my sister"), or the
# person's family, friend or pet something is said of ("my wife's name is Ana", "my
# dog's vet is …"): the person's own life, though the rule reads another entity.
_KIN = re.compile(
    rf"\b(?:is|are|é|es|são|son)\s+(?:my|meu|minha|meus|minhas|mi|mis)\s+"
    rf"(?:\w+\s+)?{_KIN_WORDS}\b"
    rf"|^\s*my\s+(?:\w+\s+)?(?:{_KIN_WORDS}|dog|cat|pet)['’]s\s"
)


def category_of(text: str, subject: Subject | None = None) -> Category:
    """The category a note belongs to, by rule — no model decides what a note is.

    Facts about the project, its services, hosts, files and team (other people
    included) are project memories; ``user``/``feedback`` are the person's own.
    """
    lowered = text.casefold()
    if re.search(r"https?://|\bdocs?\b|\bdashboard\b|\bwiki\b", lowered):
        return Category.REFERENCE
    person = subject is not None and subject.entity == "user"
    rule = subject is not None and (subject.attribute or "").startswith(("rule:", "preference:"))
    if rule and subject is not None and subject.entity == "user":
        return Category.FEEDBACK
    if _ADDRESSED.match(lowered):  # "answer in Portuguese": how the assistant should work
        return Category.FEEDBACK
    if _KIN.search(lowered):  # "Marta is my sister": the person's own life, not the team
        return Category.USER
    if not person and (
        _PROJECT_WORDS.search(lowered)
        # Other people's facts and turns ("Caroline: I moved to Berlin" is Caroline's
        # move, not the user's) are the project's.
        or (subject is not None and subject.entity not in (SELF, "user"))
    ):
        return Category.PROJECT
    if re.search(
        # "prefer", "prefiro", "prefiere", not "preferido/preferita/preferred" (favourite)
        r"\b(don'?t|do not|never|always|stop|prefer(?!id[oa]s?\b|it[oaei]\b|red\b)\w*|"
        r"prefir\w*|prefier\w*|please|nunca|"
        r"sempre|siempre|por favor)\b",
        lowered,
    ):
        return Category.FEEDBACK
    return Category.USER


@dataclass(frozen=True)
class NoteKey:
    """Where /remember files a note: its category and key, and whether a row already
    under that key is the same fact (an attribute or a rule) or only shares a name."""

    category: Category
    key: str
    restates_by_key: bool
    # False: no attribute or name could be read, the key is the value-free "note".
    named: bool = True
    # The key is a name read from the text ("Ana: …"), nothing said of what about it:
    # in a language the rule does not read, a sentence's first word ("Ich wohne …").
    by_name: bool = False
    # ... and that name is only the sentence's first word (``Subject.guessed``): with
    # nothing clearer to name the key, it is the value-free ``note``, never the word.
    first_word: bool = False
    # The key is what the rule read as the subject of "X is Y" said of no one, a word
    # its vocabulary does not know: in a language it does not read, often the value
    # ("Le vert est ma couleur préférée", "Python 3.12 is what we use").
    loose: bool = False
    # The category rests on what the rule read (the person's own "I"/"my", family,
    # project words, someone it read something of, a list, a rule): meaning does not
    # move it. Otherwise it is the rule's default, and meaning files the note.
    sure: bool = False


UNNAMED = "note"
"""The key of a note whose attribute could not be named: value-free, numbered by the
writer (``note_2``) when taken."""


def _sure(text: str, subject: Subject | None, category: Category) -> bool:
    """Whether the rule's category rests on something it read (``NoteKey.sure``)."""
    if category not in (Category.USER, Category.PROJECT) or _KIN.search(text.casefold()):
        return True
    if subject is None or subject.entity == SELF:
        return bool(_PROJECT_WORDS.search(text)) and category is Category.PROJECT
    if subject.entity in ("user", "project") or subject.is_list:
        return True
    # Someone named: sure when something said of them was read ("Carol's manager",
    # "Ana: prefers tea"), not a bare "X is Y" ("Berlin ist meine Lieblingsstadt") nor
    # a first word ("Curro en Mercadona").
    return not subject.guessed and (subject.attribute is not None or bool(_PROJECT_WORDS.search(text)))


def file_note(text: str) -> NoteKey:
    body = _PREAMBLE.sub("", text.strip(), count=1)
    subject = statement(body)
    category = category_of(body, subject)
    sure = _sure(body, subject, category)
    if subject is None:
        return NoteKey(category, UNNAMED, False, named=False, sure=sure)
    owner = _owner(SELF if subject.guessed else subject.entity, category)
    if subject.attribute is not None and subject.keyable:
        base = words(subject.keyable.replace("_", " "))
        if owner not in ("user", "project") and base[: len(owner.split("_"))] != owner.split("_"):
            base = [*owner.split("_"), *base]
        loose = subject.entity == SELF and not single_valued(subject.attribute)
        return NoteKey(category, _as_key(base) or "note", subject.single, loose=loose, sure=sure)
    if subject.entity in (SELF, "user", "project"):
        # What it is about could not be read: a key of its words would hold its value.
        return NoteKey(category, UNNAMED, False, named=False, sure=sure)
    name = subject.entity.split(":", 1)[-1]
    key = _as_key(words(name.replace("_", " "))) or UNNAMED
    by_name = not subject.is_list
    return NoteKey(category, key, False, by_name=by_name, first_word=by_name and subject.guessed, sure=sure)


def classify_note(text: str) -> tuple[str, str]:
    """(category, key) for /remember text: the key names what the note is about."""
    note = file_note(text)
    return note.category.value, note.key
