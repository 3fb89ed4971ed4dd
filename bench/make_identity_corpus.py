"""Writes the multilingual part of ``bench/identity_corpus.jsonl`` (issue 35 item 7).

    .venv/bin/python bench/make_identity_corpus.py   # rewrites the lines with id m...

For each of eleven languages, one person's facts as a native speaker would note them
with ``/remember``: seven single-valued attributes, each stated and then changed in
other words (restatements), pairs of different attributes (distinct facts of one
person), the person's sister's city beside their own (equal attribute, other person),
and English-then-native restatements (across languages). Every pair carries the
question a user would ask about its first fact in that language (``q``), for the
newer-first figure, and a ``split``: ``held`` pairs are never looked at while tuning
(thresholds, prototypes, prompts); ``tune`` pairs may be. The split is fixed by a hash
of the id, so it never moves when lines are added.
"""

from __future__ import annotations

import hashlib
import json
from itertools import combinations
from pathlib import Path

CORPUS = Path(__file__).with_name("identity_corpus.jsonl")

# attribute -> (state template, change template, question); values: three per
# attribute, a value is a str or a (form in the state template, form in the change
# template) pair where the language inflects it.
Phrases = dict[str, tuple[str, str, str]]
Values = dict[str, list[str | tuple[str, str]]]

EDITORS = ["Vim", "VS Code", "Emacs"]
CARS = ["Toyota", "Volvo", "Fiat"]
PHONES = ["iPhone", "Pixel", "Galaxy"]
BROWSERS = ["Firefox", "Chrome", "Safari"]

LANGS: dict[str, tuple[Phrases, Values, str]] = {
    "en": (
        {
            "home_city": ("I live in {v}", "I moved to {v}", "Where do I live?"),
            "employer": ("I work at {v}", "I changed jobs, I now work at {v}", "Which company do I work for?"),
            "editor": ("I use {v} as my editor", "My editor is now {v}", "Which editor do I use?"),
            "car": ("I drive a {v}", "I sold my car and now drive a {v}", "What car do I drive?"),
            "phone": ("My phone is a {v}", "I switched to a {v} phone", "What phone do I have?"),
            "browser": ("My web browser is {v}", "I now browse the web with {v}", "Which browser do I use?"),
            "occupation": ("I work as a {v}", "I am now a {v}", "What is my job?"),
        },
        {"home_city": ["Lisbon", "Berlin", "Chicago"], "employer": ["Acme", "Globex", "Initech"],
         "occupation": ["teacher", "nurse", "pilot"]},
        "My sister lives in {v}",
    ),
    "pt": (
        {
            "home_city": ("Eu moro em {v}", "Mudei para {v}", "Onde eu moro?"),
            "employer": ("Trabalho na {v}", "Mudei de emprego, agora trabalho na {v}", "Em que empresa eu trabalho?"),
            "editor": ("Uso o {v} como editor", "Meu editor agora é o {v}", "Qual editor eu uso?"),
            "car": ("Dirijo um {v}", "Vendi meu carro e agora dirijo um {v}", "Que carro eu dirijo?"),
            "phone": ("Meu celular é um {v}", "Troquei de celular, agora tenho um {v}", "Qual é o meu celular?"),
            "browser": ("Meu navegador é o {v}", "Agora navego na internet com o {v}", "Qual navegador eu uso?"),
            "occupation": ("Trabalho como {v}", "Agora sou {v}", "Qual é a minha profissão?"),
        },
        {"home_city": ["Recife", "Curitiba", "Coimbra"], "employer": ["Natura", "Embraer", "Petrobras"],
         "occupation": ["professor", "enfermeiro", "piloto"]},
        "Minha irmã mora em {v}",
    ),
    "es": (
        {
            "home_city": ("Vivo en {v}", "Me mudé a {v}", "¿Dónde vivo?"),
            "employer": ("Trabajo en {v}", "Cambié de trabajo, ahora trabajo en {v}", "¿En qué empresa trabajo?"),
            "editor": ("Uso {v} como editor", "Mi editor ahora es {v}", "¿Qué editor uso?"),
            "car": ("Conduzco un {v}", "Vendí mi coche y ahora conduzco un {v}", "¿Qué coche conduzco?"),
            "phone": ("Mi móvil es un {v}", "Cambié de móvil, ahora tengo un {v}", "¿Qué móvil tengo?"),
            "browser": ("Mi navegador es {v}", "Ahora navego por internet con {v}", "¿Qué navegador uso?"),
            "occupation": ("Trabajo como {v}", "Ahora soy {v}", "¿Cuál es mi profesión?"),
        },
        {"home_city": ["Sevilla", "Bilbao", "Valencia"], "employer": ["Telefónica", "Iberdrola", "Inditex"],
         "occupation": ["profesor", "enfermero", "piloto"]},
        "Mi hermana vive en {v}",
    ),
    "de": (
        {
            "home_city": ("Ich wohne in {v}", "Ich bin nach {v} gezogen", "Wo wohne ich?"),
            "employer": ("Ich arbeite bei {v}", "Ich habe den Job gewechselt und arbeite jetzt bei {v}",
                         "Bei welcher Firma arbeite ich?"),
            "editor": ("Ich benutze {v} als Editor", "Mein Editor ist jetzt {v}", "Welchen Editor benutze ich?"),
            "car": ("Ich fahre einen {v}", "Ich habe mein Auto verkauft und fahre jetzt einen {v}",
                    "Welches Auto fahre ich?"),
            "phone": ("Mein Handy ist ein {v}", "Ich habe ein neues Handy, jetzt ein {v}", "Welches Handy habe ich?"),
            "browser": ("Mein Browser ist {v}", "Ich surfe jetzt mit {v} im Internet", "Welchen Browser benutze ich?"),
            "occupation": ("Ich arbeite als {v}", "Ich bin jetzt {v}", "Was ist mein Beruf?"),
        },
        {"home_city": ["München", "Hamburg", "Köln"], "employer": ["Siemens", "SAP", "Bosch"],
         "occupation": ["Lehrer", "Krankenpfleger", "Pilot"]},
        "Meine Schwester wohnt in {v}",
    ),
    "fr": (
        {
            "home_city": ("J'habite à {v}", "J'ai déménagé à {v}", "Où est-ce que j'habite ?"),
            "employer": ("Je travaille chez {v}", "J'ai changé d'emploi, je travaille maintenant chez {v}",
                         "Pour quelle entreprise je travaille ?"),
            "editor": ("J'utilise {v} comme éditeur", "Mon éditeur est maintenant {v}", "Quel éditeur j'utilise ?"),
            "car": ("Je conduis une {v}", "J'ai vendu ma voiture et je conduis maintenant une {v}",
                    "Quelle voiture je conduis ?"),
            "phone": ("Mon téléphone est un {v}", "J'ai changé de téléphone, j'ai maintenant un {v}",
                      "Quel téléphone j'ai ?"),
            "browser": ("Mon navigateur est {v}", "Je navigue maintenant sur internet avec {v}",
                        "Quel navigateur j'utilise ?"),
            "occupation": ("Je travaille comme {v}", "Je suis maintenant {v}", "Quel est mon métier ?"),
        },
        {"home_city": ["Lyon", "Marseille", "Toulouse"], "employer": ["Renault", "Danone", "Michelin"],
         "occupation": ["professeur", "infirmier", "pilote"]},
        "Ma sœur habite à {v}",
    ),
    "it": (
        {
            "home_city": ("Abito a {v}", "Mi sono trasferito a {v}", "Dove abito?"),
            "employer": ("Lavoro presso {v}", "Ho cambiato lavoro, ora lavoro presso {v}", "Per quale azienda lavoro?"),
            "editor": ("Uso {v} come editor", "Il mio editor ora è {v}", "Quale editor uso?"),
            "car": ("Guido una {v}", "Ho venduto la macchina e ora guido una {v}", "Che macchina guido?"),
            "phone": ("Il mio telefono è un {v}", "Ho cambiato telefono, ora ho un {v}", "Che telefono ho?"),
            "browser": ("Il mio browser è {v}", "Ora navigo su internet con {v}", "Quale browser uso?"),
            "occupation": ("Lavoro come {v}", "Adesso sono {v}", "Qual è il mio lavoro?"),
        },
        {"home_city": ["Milano", "Roma", "Torino"], "employer": ["Ferrero", "Barilla", "Pirelli"],
         "occupation": ["insegnante", "infermiere", "pilota"]},
        "Mia sorella abita a {v}",
    ),
    "nl": (
        {
            "home_city": ("Ik woon in {v}", "Ik ben verhuisd naar {v}", "Waar woon ik?"),
            "employer": ("Ik werk bij {v}", "Ik heb een nieuwe baan en werk nu bij {v}", "Bij welk bedrijf werk ik?"),
            "editor": ("Ik gebruik {v} als editor", "Mijn editor is nu {v}", "Welke editor gebruik ik?"),
            "car": ("Ik rijd in een {v}", "Ik heb mijn auto verkocht en rijd nu in een {v}", "In welke auto rijd ik?"),
            "phone": ("Mijn telefoon is een {v}", "Ik heb een nieuwe telefoon, nu een {v}", "Welke telefoon heb ik?"),
            "browser": ("Mijn browser is {v}", "Ik surf nu met {v} op internet", "Welke browser gebruik ik?"),
            "occupation": ("Ik werk als {v}", "Ik ben nu {v}", "Wat is mijn beroep?"),
        },
        {"home_city": ["Amsterdam", "Utrecht", "Rotterdam"], "employer": ["Philips", "Shell", "Heineken"],
         "occupation": ["leraar", "verpleegkundige", "piloot"]},
        "Mijn zus woont in {v}",
    ),
    "zh": (
        {
            "home_city": ("我住在{v}", "我搬到了{v}", "我住在哪里？"),
            "employer": ("我在{v}工作", "我换了工作，现在在{v}上班", "我在哪家公司工作？"),
            "editor": ("我用{v}作为编辑器", "我现在的编辑器是{v}", "我用什么编辑器？"),
            "car": ("我开一辆{v}", "我把车卖了，现在开{v}", "我开什么车？"),
            "phone": ("我的手机是{v}", "我换了手机，现在用{v}", "我用什么手机？"),
            "browser": ("我的浏览器是{v}", "我现在用{v}上网", "我用什么浏览器？"),
            "occupation": ("我是一名{v}", "我现在当{v}", "我的职业是什么？"),
        },
        {"home_city": ["北京", "上海", "广州"], "employer": ["腾讯", "阿里巴巴", "华为"],
         "occupation": ["老师", "护士", "飞行员"]},
        "我姐姐住在{v}",
    ),
    "ja": (
        {
            "home_city": ("私は{v}に住んでいます", "{v}に引っ越しました", "私はどこに住んでいますか？"),
            "employer": ("私は{v}で働いています", "転職して、今は{v}で働いています", "私はどの会社で働いていますか？"),
            "editor": ("エディタは{v}を使っています", "今のエディタは{v}です", "私はどのエディタを使っていますか？"),
            "car": ("{v}に乗っています", "車を売って、今は{v}に乗っています", "私はどの車に乗っていますか？"),
            "phone": ("私の携帯は{v}です", "携帯を{v}に替えました", "私の携帯は何ですか？"),
            "browser": ("ブラウザは{v}です", "今は{v}でネットを見ています", "私はどのブラウザを使っていますか？"),
            "occupation": ("私の仕事は{v}です", "今は{v}として働いています", "私の職業は何ですか？"),
        },
        {"home_city": ["大阪", "東京", "京都"], "employer": ["ソニー", "トヨタ", "任天堂"],
         "occupation": ["教師", "看護師", "パイロット"]},
        "姉は{v}に住んでいます",
    ),
    "ko": (
        {
            "home_city": ("저는 {v}에 살아요", "{v}로 이사했어요", "저는 어디에 살아요?"),
            "employer": ("저는 {v}에서 일해요", "이직해서 지금은 {v}에서 일해요", "저는 어느 회사에서 일해요?"),
            "editor": ("저는 {v} 에디터를 써요", "이제 제 에디터는 {v}입니다", "저는 어떤 에디터를 써요?"),
            "car": ("제 차는 {v}입니다", "차를 팔고 이제 {v} 차를 타요", "저는 무슨 차를 타요?"),
            "phone": ("제 휴대폰은 {v}입니다", "휴대폰을 {v} 폰으로 바꿨어요", "제 휴대폰은 뭐예요?"),
            "browser": ("제 브라우저는 {v}입니다", "이제 {v} 브라우저로 인터넷을 해요", "저는 어떤 브라우저를 써요?"),
            "occupation": ("제 직업은 {v}입니다", "이제 {v}로 일해요", "제 직업은 뭐예요?"),
        },
        {"home_city": ["서울", "대구", "제주"], "employer": ["삼성", "네이버", "카카오"],
         "occupation": ["교사", "간호사", "조종사"]},
        "제 언니는 {v}에 살아요",
    ),
    "ru": (
        {
            "home_city": ("Я живу в {v}", "Я переехал в {v}", "Где я живу?"),
            "employer": ("Я работаю в компании {v}", "Я сменил работу и теперь работаю в компании {v}",
                         "В какой компании я работаю?"),
            "editor": ("Я использую {v} как редактор", "Теперь мой редактор — {v}", "Какой редактор я использую?"),
            "car": ("Моя машина — {v}", "Я продал машину и теперь езжу на машине {v}", "Какая у меня машина?"),
            "phone": ("Мой телефон — {v}", "Я сменил телефон, теперь у меня {v}", "Какой у меня телефон?"),
            "browser": ("Мой браузер — {v}", "Теперь я выхожу в интернет через {v}", "Каким браузером я пользуюсь?"),
            "occupation": ("Я работаю {v}", "Теперь я {v}", "Кем я работаю?"),
        },
        {"home_city": [("Москве", "Москву"), ("Казани", "Казань"), ("Новосибирске", "Новосибирск")],
         "employer": ["Яндекс", "Сбер", "Касперский"],
         "occupation": [("учителем", "учитель"), ("медсестрой", "медсестра"), ("пилотом", "пилот")]},
        "Моя сестра живёт в {v}",
    ),
}
SHARED: Values = {"editor": EDITORS, "car": CARS, "phone": PHONES, "browser": BROWSERS}


def _form(value: str | tuple[str, str], which: int) -> str:
    return value if isinstance(value, str) else value[which]


def _split(pair_id: str) -> str:
    return "held" if hashlib.sha256(pair_id.encode()).digest()[0] % 2 else "tune"


def language_pairs(lang: str) -> list[dict[str, object]]:
    """One language's pairs (see the module doc)."""
    phrases, own, sister = LANGS[lang]
    values = {**SHARED, **own}
    english = LANGS["en"][0]
    pairs: list[dict[str, object]] = []

    def add(kind: str, a: str, b: str, label: str, q: str) -> None:
        pid = f"m{lang}{len(pairs) + 1:03}"
        pairs.append({"id": pid, "lang": lang, "kind": kind, "path": "remember", "a": {"text": a},
                      "b": {"text": b}, "label": label, "q": q, "split": _split(pid)})

    for attr, (state, change, q) in phrases.items():
        v = values[attr]
        add("value over time", state.format(v=_form(v[0], 0)), change.format(v=_form(v[1], 1)), "restates", q)
        add("value over time", state.format(v=_form(v[1], 0)), change.format(v=_form(v[2], 1)), "restates", q)
        add("value over time, same words", state.format(v=_form(v[2], 0)), state.format(v=_form(v[0], 0)),
            "restates", q)
    for i, (x, y) in enumerate(combinations(phrases, 2)):
        (sx, cx, qx), (sy, cy, _) = phrases[x], phrases[y]
        a = (sx if i % 2 == 0 else cx).format(v=_form(values[x][i % 3], 0 if i % 2 == 0 else 1))
        b = (sy if i % 3 else cy).format(v=_form(values[y][(i + 1) % 3], 0 if i % 3 else 1))
        add("same person, other fact", a, b, "distinct", qx)
    cities = values["home_city"]
    home_q = phrases["home_city"][2]
    for i in range(3):
        mine = phrases["home_city"][0].format(v=_form(cities[i], 0))
        add("other person, same attribute", mine, sister.format(v=_form(cities[(i + 1) % 3], 0)), "distinct", home_q)
    if lang != "en":
        for attr in ("home_city", "employer", "editor"):
            en_value = LANGS["en"][1].get(attr, SHARED.get(attr, []))
            a = english[attr][0].format(v=_form(en_value[0], 0))
            add("across languages", a, phrases[attr][1].format(v=_form(values[attr][1], 1)), "restates",
                phrases[attr][2])
        a = english["home_city"][0].format(v="Lisbon")
        add("across languages, other fact", a, phrases["employer"][0].format(v=_form(values["employer"][0], 0)),
            "distinct", phrases["home_city"][2])
        add("across languages, other fact", english["editor"][0].format(v="Vim"),
            phrases["car"][0].format(v=_form(values["car"][0], 0)), "distinct", phrases["editor"][2])
    return pairs


def main() -> None:
    kept = [line for line in CORPUS.read_text(encoding="utf-8").splitlines()
            if line.strip() and not json.loads(line)["id"].startswith("m")]
    rows = []
    for line in kept:
        row = json.loads(line)
        row.setdefault("split", _split(row["id"]))
        rows.append(json.dumps(row, ensure_ascii=False))
    for lang in LANGS:
        rows += [json.dumps(p, ensure_ascii=False) for p in language_pairs(lang)]
    CORPUS.write_text("\n".join(rows) + "\n", encoding="utf-8")
    print(f"{len(rows)} pairs written to {CORPUS}")


if __name__ == "__main__":
    main()
