"""Whose a fact is: the person's own, or a relative's, a friend's, a colleague's.

Examples, not rules: for each holder, in the eleven languages of ``attributes.py``,
two statements and one question about that holder, each on a different attribute (a
job, a city, a birthday, a pet...), so that what one holder's examples share is the
holder, not an attribute, a language or a form. ``holder_space.py`` fits the
directions that separate them and reranks recall's candidates by agreement there. No
word of these examples is ever matched against a fact or a question; none of them is
a sentence of a bench corpus (``bench/whose_corpus.jsonl`` is measured on, these only
place the holders in the embedder's space).
"""

from __future__ import annotations

HOLDERS = ("self", "father", "mother", "sister", "brother", "partner", "child", "friend", "colleague")
"""The holders, in the order each language lists its examples."""

# language -> per holder (in HOLDERS order): two statements, then a question.
EXAMPLES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "en": (
        ("I work as a nurse in a hospital.", "I have a grey cat called Mochi.", "When is my birthday?"),
        ("My father is a retired carpenter.", "My dad lives in Leeds.", "What car does my father drive?"),
        ("My mother was born on 3 May.", "My mum teaches chemistry.", "Where does my mother live?"),
        ("My sister is allergic to shellfish.", "My sister plays the violin.", "What is my sister's job?"),
        ("My brother drives an old Volvo.", "My brother works at a bank in Bristol.", "When was my brother born?"),
        ("My wife is a pharmacist.", "My husband loves climbing.", "Where does my wife work?"),
        ("My son goes to school in Oxford.", "My daughter has a hamster.", "How old is my son?"),
        ("My friend Tom lives in Glasgow.", "My best friend is vegetarian.", "What does my friend do for a living?"),
        ("My colleague Priya is a data analyst.", "My coworker's phone number is 555 0199.", "Where does my colleague live?"),
    ),
    "pt": (
        ("Eu moro em Curitiba.", "Sou alérgico a amendoim.", "Qual é a minha profissão?"),
        ("O meu pai trabalha como eletricista.", "Meu pai nasceu em 1958.", "Onde o meu pai mora?"),
        ("Minha mãe tem um cachorro chamado Bidu.", "A minha mãe mora em Braga.", "O que a minha mãe faz da vida?"),
        ("Minha irmã é dentista.", "A minha irmã faz anos em julho.", "Onde a minha irmã trabalha?"),
        ("Meu irmão mora em Manaus.", "O meu irmão joga futebol aos sábados.", "Qual é o carro do meu irmão?"),
        ("Minha esposa trabalha num banco.", "O meu marido cozinha muito bem.", "Quando é o aniversário da minha mulher?"),
        ("Meu filho estuda engenharia.", "A minha filha tem alergia a glúten.", "Onde o meu filho mora?"),
        ("Meu amigo Paulo é piloto.", "A minha melhor amiga vive em Faro.", "Qual é o telefone do meu amigo?"),
        ("Meu colega de trabalho se chama Renato e é designer.", "A minha colega mora em Niterói.", "Qual é o cargo do meu colega?"),
    ),
    "es": (
        ("Mi cumpleaños es el 9 de octubre.", "Trabajo como contable.", "¿Dónde vivo?"),
        ("Mi padre tiene un perro llamado Toby.", "Mi padre es médico de familia.", "¿Cuándo nació mi padre?"),
        ("Mi madre vive en Zaragoza.", "Mi madre conduce un Seat Ibiza.", "¿En qué trabaja mi madre?"),
        ("Mi hermana trabaja en una farmacia.", "Mi hermana vive en Málaga.", "¿Qué deporte practica mi hermana?"),
        ("Mi hermano es ingeniero de caminos.", "Mi hermano cumple años en enero.", "¿Dónde vive mi hermano?"),
        ("Mi mujer es profesora de primaria.", "Mi marido trabaja en Telefónica.", "¿De dónde es mi pareja?"),
        ("Mi hijo vive en Londres.", "Mi hija juega al baloncesto.", "¿A qué se dedica mi hijo?"),
        ("Mi amigo Javier es fontanero.", "Mi mejor amiga nació en Cádiz.", "¿Dónde trabaja mi amigo?"),
        ("Mi compañero de trabajo vive en Getafe.", "Mi compañera es la jefa de proyecto.", "¿Cuál es el correo de mi compañero?"),
    ),
    "de": (
        ("Ich arbeite als Elektriker.", "Ich wohne in Freiburg.", "Welches Auto fahre ich?"),
        ("Mein Vater wohnt in Kassel.", "Mein Vater ist gegen Pollen allergisch.", "Was ist mein Vater von Beruf?"),
        ("Meine Mutter ist Ärztin.", "Meine Mutter hat im Juni Geburtstag.", "Wo wohnt meine Mutter?"),
        ("Meine Schwester wohnt in Graz.", "Meine Schwester arbeitet bei der Post.", "Wann hat meine Schwester Geburtstag?"),
        ("Mein Bruder ist Koch.", "Mein Bruder hat einen Hund namens Bello.", "Wo arbeitet mein Bruder?"),
        ("Meine Frau arbeitet als Anwältin.", "Mein Mann kommt aus Dresden.", "Welchen Beruf hat meine Frau?"),
        ("Mein Sohn studiert in Aachen.", "Meine Tochter spielt Klavier.", "Wann ist mein Sohn geboren?"),
        ("Mein Freund Lukas ist Polizist.", "Meine beste Freundin wohnt in Wien.", "Wo wohnt mein Freund?"),
        ("Meine Kollegin heißt Sabine und ist Buchhalterin.", "Mein Kollege fährt mit dem Rad zur Arbeit.", "Was macht mein Kollege beruflich?"),
    ),
    "fr": (
        ("J'habite à Nantes.", "Je suis infirmier.", "Quel est mon numéro de téléphone ?"),
        ("Mon père est boulanger.", "Mon père habite à Lille.", "Quand est l'anniversaire de mon père ?"),
        ("Ma mère travaille à la mairie.", "Ma mère a un chat noir.", "Quel métier fait ma mère ?"),
        ("Ma sœur est avocate.", "Ma sœur habite à Bordeaux.", "Où travaille ma sœur ?"),
        ("Mon frère est né en 1990.", "Mon frère est plombier.", "Où habite mon frère ?"),
        ("Ma femme est architecte.", "Mon mari conduit une Peugeot.", "Que fait ma femme dans la vie ?"),
        ("Mon fils travaille chez Airbus.", "Ma fille habite à Lyon.", "Quel âge a ma fille ?"),
        ("Mon ami Julien est pompier.", "Ma meilleure amie est allergique aux chats.", "Où habite mon ami ?"),
        ("Mon collègue s'appelle Marc et il est développeur.", "Ma collègue habite à Rennes.", "Quel est le poste de ma collègue ?"),
    ),
    "it": (
        ("Faccio il farmacista.", "Il mio compleanno è il 2 aprile.", "In quale città abito?"),
        ("Mio padre fa il meccanico.", "Mio padre vive a Bologna.", "Che lavoro fa mio padre?"),
        ("Mia madre abita a Torino.", "Mia madre è insegnante di latino.", "Quando è nata mia madre?"),
        ("Mia sorella lavora in banca.", "Mia sorella ha un coniglio.", "Dove vive mia sorella?"),
        ("Mio fratello vive a Napoli.", "Mio fratello fa l'avvocato.", "Dove lavora mio fratello?"),
        ("Mia moglie è veterinaria.", "Mio marito lavora in Ferrari.", "Che lavoro fa mio marito?"),
        ("Mio figlio studia medicina a Pavia.", "Mia figlia è nata a dicembre.", "Dove abita mia figlia?"),
        ("Il mio amico Marco è cuoco.", "La mia migliore amica vive a Genova.", "Che macchina ha il mio amico?"),
        ("Il mio collega è un grafico.", "La mia collega abita a Monza.", "Qual è il ruolo del mio collega?"),
    ),
    "nl": (
        ("Ik ben leraar op een basisschool.", "Ik heb een hond die Max heet.", "Waar woon ik?"),
        ("Mijn vader woont in Groningen.", "Mijn vader is timmerman.", "Waar werkt mijn vader?"),
        ("Mijn moeder is verpleegkundige.", "Mijn moeder is jarig in maart.", "In welke stad woont mijn moeder?"),
        ("Mijn zus woont in Antwerpen.", "Mijn zus is kapper.", "Wat doet mijn zus voor werk?"),
        ("Mijn broer werkt bij Philips.", "Mijn broer woont in Delft.", "Hoe oud is mijn broer?"),
        ("Mijn vrouw is tandarts.", "Mijn man werkt als piloot.", "Waar werkt mijn vrouw?"),
        ("Mijn zoon woont in Rotterdam.", "Mijn dochter studeert rechten.", "Wat voor werk doet mijn zoon?"),
        ("Mijn vriend Bas is bakker.", "Mijn vriendin woont in Haarlem.", "Waar woont mijn vriend?"),
        ("Mijn collega heet Sanne en is projectleider.", "Mijn collega woont in Amersfoort.", "Wat is de functie van mijn collega?"),
    ),
    "zh": (
        ("我是一名会计。", "我住在成都。", "我的生日是哪天？"),
        ("我爸爸是厨师。", "我父亲住在西安。", "我爸爸在哪里工作？"),
        ("我妈妈是护士。", "我母亲的生日是八月五号。", "我妈妈住在哪里？"),
        ("我姐姐在银行上班。", "我妹妹住在广州。", "我姐姐是做什么工作的？"),
        ("我哥哥是律师。", "我弟弟养了一只狗。", "我哥哥住在哪个城市？"),
        ("我妻子是医生。", "我丈夫在华为工作。", "我老婆做什么工作？"),
        ("我儿子在北京上大学。", "我女儿是老师。", "我儿子住在哪里？"),
        ("我的朋友小王是工程师。", "我的好朋友住在厦门。", "我朋友是做什么的？"),
        ("我的同事叫李明，他是产品经理。", "我同事住在天津。", "我同事在哪个部门？"),
    ),
    "ja": (
        ("私はエンジニアとして働いています。", "私は横浜に住んでいます。", "私の趣味は何ですか？"),
        ("父は医者です。", "父は名古屋に住んでいます。", "父の誕生日はいつですか？"),
        ("母は小学校の先生です。", "母は猫を二匹飼っています。", "母はどこに住んでいますか？"),
        ("姉は看護師です。", "妹は大阪に住んでいます。", "姉の仕事は何ですか？"),
        ("兄は札幌に住んでいます。", "弟は銀行員です。", "兄はどこで働いていますか？"),
        ("妻は薬剤師です。", "夫はトヨタで働いています。", "妻の仕事は何ですか？"),
        ("息子は京都の大学に通っています。", "娘は花粉症です。", "息子は何の仕事をしていますか？"),
        ("友達の健太は消防士です。", "親友は神戸に住んでいます。", "友達はどこに住んでいますか？"),
        ("同僚の佐藤さんはデザイナーです。", "同僚は千葉に住んでいます。", "同僚の役職は何ですか？"),
    ),
    "ko": (
        ("저는 간호사로 일해요.", "저는 부산에 살아요.", "제 생일이 언제예요?"),
        ("아버지는 택시 기사세요.", "아버지는 대구에 사세요.", "아버지 직업이 뭐예요?"),
        ("어머니는 요리사세요.", "어머니 생신은 10월이에요.", "어머니는 어디에 사세요?"),
        ("누나는 은행에서 일해요.", "언니는 서울에 살아요.", "여동생은 무슨 일을 해요?"),
        ("형은 경찰관이에요.", "남동생은 인천에 살아요.", "형은 어디서 일해요?"),
        ("아내는 치과의사예요.", "남편은 삼성에서 일해요.", "아내는 무슨 일을 해요?"),
        ("아들은 대전에서 대학교에 다녀요.", "딸은 피아노를 쳐요.", "아들은 어디에 살아요?"),
        ("제 친구 민수는 프로그래머예요.", "제 친한 친구는 제주도에 살아요.", "친구는 무슨 일을 해요?"),
        ("제 동료는 마케팅 팀장이에요.", "직장 동료는 수원에 살아요.", "동료의 전화번호가 뭐예요?"),
    ),
    "ru": (
        ("Я работаю программистом.", "Я живу в Новосибирске.", "Когда у меня день рождения?"),
        ("Мой отец работает инженером.", "Папа живёт в Твери.", "Какая машина у моего отца?"),
        ("Моя мама — бухгалтер.", "Мама живёт в Воронеже.", "Кем работает моя мать?"),
        ("Моя сестра живёт в Казани.", "Сестра работает врачом.", "Когда родилась моя сестра?"),
        ("Мой брат — водитель автобуса.", "Брат живёт в Омске.", "Где работает мой брат?"),
        ("Моя жена работает юристом.", "Мой муж из Самары.", "Кем работает моя жена?"),
        ("Мой сын учится в Томске.", "Моя дочь работает в аптеке.", "Где живёт мой сын?"),
        ("Мой друг Саша — повар.", "Моя подруга живёт в Сочи.", "Чем занимается мой друг?"),
        ("Моя коллега Оля — дизайнер.", "Мой коллега живёт в Химках.", "Какая должность у моего коллеги?"),
    ),
}
"""The examples, by language (the eleven of ``attributes.py``), per holder."""


def example_rows() -> tuple[list[str], list[str], list[int]]:
    """(statements, questions, their holders): every language's statements, then every
    language's questions, with each text's holder (an index into ``HOLDERS``) in
    that order (statements first, then questions)."""
    statements: list[str] = []
    questions: list[str] = []
    said: list[int] = []
    asked: list[int] = []
    for per_holder in EXAMPLES.values():
        for holder, (first, second, question) in enumerate(per_holder):
            statements += [first, second]
            said += [holder, holder]
            questions.append(question)
            asked.append(holder)
    return statements, questions, said + asked
