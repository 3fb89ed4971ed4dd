"""Whose a note is: a fact of a person's own life, or of a software project.

Examples, not rules: in the eleven languages of ``attributes.py``, eight statements of
a person's own life (theirs, their family's and friends': a home, a club they support,
a school, a pet, a meal, a gym, a relative's job, their own job in software...) and eight of a project (its
code, framework, database, hosts, deploys, tests, releases, and who on the team owns
what), each on a different attribute and in varied forms — first person, value first,
no pronoun — so that what one side's examples share is whose life it is, not an
attribute, a language or an opening word. ``owner_space.py`` fits the direction that
separates them and files a note the rule and its attribute cannot place. No word of
these examples is ever matched against a note; none of them is a sentence of a bench
corpus (``bench/filing_corpus.jsonl`` is measured on, these only place the two sides
in the embedder's space).
"""

from __future__ import annotations

OWNERS = ("life", "project")
"""The two sides, in the order each language lists its examples."""

# language -> (a person's own life, a project), eight statements each.
EXAMPLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "en": (
        ("I've followed Celtic since I was a kid", "My daughter starts school in September", "Sushi is my comfort food",
         "I'm doing a master's at Edinburgh", "My best mate is a firefighter", "I go swimming before work",
         "We adopted a rescue greyhound", "I'm a software engineer at a startup"),
        ("The billing service is written in Scala", "Our staging box is stage-02", "CI runs the test suite on every push",
         "Priya owns the login flow", "We ship a release every other Monday", "The app is hosted on Render",
         "Feature flags live in LaunchDarkly", "The repo uses trunk-based development"),
    ),
    "pt": (
        ("Sou torcedor do Palmeiras", "Minha filha faz balé", "Estou cursando direito na PUC",
         "Feijoada é a minha comida preferida", "Meu melhor amigo mora em Recife", "Corro no parque aos domingos",
         "Tenho dois gatos em casa", "Sou programador numa fintech"),
        ("O serviço de cobrança é escrito em Elixir", "Os testes rodam no GitHub Actions", "O Rafael cuida da API de busca",
         "Publicamos a aplicação na Vercel", "O banco de produção é o Postgres", "A versão nova sai na quinta",
         "O repositório usa commits convencionais", "O servidor de homologação é o hml01"),
    ),
    "es": (
        ("Soy socio del Athletic", "Mi hijo estudia en un colegio público", "Hago yoga los jueves",
         "El gazpacho es lo que más me gusta", "Mi mejor amiga vive en Granada", "Estoy haciendo un máster en la UPV",
         "Uso Firefox en mi portátil", "Trabajo de desarrolladora en una consultora"),
        ("El servicio de facturas está escrito en Go", "La API pública escucha en el puerto 8080", "Lucía se encarga del despliegue",
         "Los tests corren en GitLab CI", "Publicamos la web en Netlify", "La base de datos es PostgreSQL 16",
         "Sacamos versión cada dos semanas", "El repositorio usa ramas por funcionalidad"),
    ),
    "de": (
        ("Ich halte zum HSV", "Meine Oma wohnt auf dem Land", "Ich mache eine Ausbildung zur Krankenpflegerin",
         "Currywurst esse ich am liebsten", "Mein bester Freund ist Lehrer", "Ich gehe zweimal die Woche ins Fitnessstudio",
         "Ich schreibe privat alles in Vim", "Ich bin Softwareentwickler bei einer Versicherung"),
        ("Der Rechnungsdienst ist in Rust geschrieben", "Die Pipeline läuft auf GitLab", "Anna kümmert sich um das Login",
         "Wir hosten die App bei Hetzner", "Unsere Datenbank ist MariaDB", "Das nächste Release kommt am Dienstag",
         "Im Repo gilt Code-Review für jeden Merge", "Der Testserver heißt qa-03"),
    ),
    "fr": (
        ("Je suis fan du Stade Rennais", "Ma fille fait du judo", "Je prépare une licence à Lyon 2",
         "La raclette est mon plat préféré", "Mon meilleur ami habite à Lille", "Je cours le long du canal le dimanche",
         "Nous avons un lapin nain", "Je suis développeuse dans une agence web"),
        ("Le service de facturation est écrit en Kotlin", "Les tests tournent sur GitLab CI", "Camille s'occupe de l'API de recherche",
         "Nous hébergeons l'application chez OVH", "La base de production est PostgreSQL", "La prochaine version sort mardi",
         "Le dépôt suit git flow", "Le serveur de recette est recette-01"),
    ),
    "it": (
        ("Sono tifoso della Juventus", "Mia figlia fa danza", "Frequento l'università a Padova",
         "La carbonara è il mio piatto preferito", "Il mio migliore amico vive a Bari", "Nuoto in piscina il martedì",
         "Uso Emacs anche per i miei appunti", "Faccio il programmatore in una software house"),
        ("Il servizio di fatturazione è scritto in Python", "I test girano su Jenkins", "Luca si occupa dell'autenticazione",
         "Pubblichiamo l'app su Render", "Il database di produzione è MySQL", "La prossima release esce giovedì",
         "Il nostro linguaggio è Kotlin", "Il server di collaudo è coll-02"),
    ),
    "nl": (
        ("Ik ben supporter van Feyenoord", "Mijn dochter zit op voetbal", "Ik studeer geneeskunde in Leiden",
         "Stamppot is mijn lievelingseten", "Mijn beste vriend woont in Gent", "Ik fiets elke ochtend naar mijn werk",
         "We hebben een kat en twee kippen", "Ik werk als programmeur bij een bank"),
        ("De factuurdienst is geschreven in C#", "De tests draaien op Azure Pipelines", "Sanne beheert de zoek-API",
         "De app wordt gehost bij TransIP", "Onze productiedatabase is PostgreSQL", "De volgende release is woensdag",
         "Onze code is grotendeels TypeScript", "De acceptatieserver heet acc-01"),
    ),
    "zh": (
        ("我是湖人队的球迷", "我儿子在上小学", "我在浙江大学读研究生",
         "饺子是我最爱吃的", "我的好朋友住在重庆", "我每天早上去公园跑步",
         "我家养了一只鹦鹉", "我在一家互联网公司当程序员"),
        ("计费服务是用 Go 写的", "测试在 Jenkins 上跑", "小王负责登录模块",
         "应用部署在腾讯云", "生产数据库是 MySQL", "下个版本周四发布",
         "代码仓库采用主干开发", "预发布服务器是 pre-01"),
    ),
    "ja": (
        ("私はジャイアンツのファンです", "娘はピアノを習っています", "東北大学の大学院に通っています",
         "カレーが一番好きです", "親友は福岡に住んでいます", "週末はヨガ教室に行きます",
         "うちではウサギを飼っています", "私はIT企業でプログラマーをしています"),
        ("請求サービスは Java で書かれています", "テストは CircleCI で実行されます", "鈴木さんが検索 API を担当しています",
         "アプリは AWS にデプロイしています", "本番の DB は MySQL です", "次のリリースは金曜日です",
         "リポジトリはプルリクエスト必須です", "検証サーバーは verify-01 です"),
    ),
    "ko": (
        ("저는 삼성 라이온즈를 응원해요", "딸이 태권도를 배워요", "고려대에서 경영학을 공부해요",
         "떡볶이를 제일 좋아해요", "친한 친구가 대구에 살아요", "주말마다 등산을 해요",
         "고양이 두 마리를 키워요", "저는 스타트업에서 개발자로 일해요"),
        ("결제 서비스는 Kotlin으로 작성됐어요", "테스트는 GitHub Actions에서 돌아요", "지수 씨가 로그인 기능을 맡고 있어요",
         "앱은 GCP에 배포돼요", "운영 데이터베이스는 MySQL이에요", "다음 릴리스는 화요일이에요",
         "저장소는 코드 리뷰 후에만 머지해요", "개발 서버는 dev-02예요"),
    ),
    "ru": (
        ("Я болею за ЦСКА", "Моя дочь ходит в музыкальную школу", "Я учусь в магистратуре СПбГУ",
         "Борщ — моё любимое блюдо", "Мой лучший друг живёт в Казани", "По утрам я бегаю в парке",
         "У нас дома живёт хомяк", "Я работаю программистом в банке"),
        ("Сервис счетов написан на Kotlin", "Тесты гоняются в GitLab CI", "Дима отвечает за поиск",
         "Мы разворачиваем приложение в Selectel", "Основная база — PostgreSQL", "Следующий релиз в пятницу",
         "В репозитории мержим только после ревью", "Выкатываем сборки на stage-05 каждый вечер"),
    ),
}
"""The examples, by language (the eleven of ``attributes.py``): life, then project."""


def example_rows() -> tuple[list[str], list[int]]:
    """(statements, each one's side: 0 life, 1 project), every language in turn."""
    texts: list[str] = []
    rows: list[int] = []
    for sides in EXAMPLES.values():
        for side, statements in enumerate(sides):
            texts += statements
            rows += [side] * len(statements)
    return texts, rows
