"""The secret scanner (issue 14 item 4): detect-secrets plus our rules, span redaction,
and no secret of any tested format in the memory table, an export or the debug log."""

from __future__ import annotations

import logging
import re

import pytest
from trust_corpus import SECRETS, SecretFormat

from qwenmem_tui import debuglog, secrets
from qwenmem_tui.memory.backup import export_lines
from qwenmem_tui.memory.model import FLAG_SECRET_REDACTED, Origin, RememberRequest, Status, WriteRequest
from qwenmem_tui.memory.provenance import Provenance
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.memory.writer import MemoryRejected
from qwenmem_tui.paths import Paths

PROJECT = "/work/secret-project"


def leaked(secret: SecretFormat, text: str) -> bool:
    """Any long line of the secret still in ``text`` (a PEM body line counts)."""
    parts = [p for p in secret.secret.split("\n") if len(p) >= 8] or [secret.secret]
    return any(part in text for part in parts)


def test_at_least_forty_formats() -> None:
    assert len(SECRETS) >= 40 and len({s.name for s in SECRETS}) == len(SECRETS)


@pytest.mark.parametrize("fmt", SECRETS, ids=[s.name for s in SECRETS])
def test_every_format_is_found_and_only_its_span_goes(fmt: SecretFormat) -> None:
    redacted = secrets.redact(fmt.text)
    assert not leaked(fmt, redacted), redacted
    # The words around the secret stay: "password: [REDACTED]", not "[REDACTED]".
    before = fmt.text[: fmt.text.index(fmt.secret)].strip()
    if len(before) >= 4 and not before.endswith(("=", ":")):
        assert before.split()[0] in redacted


def test_detect_secrets_plugins_do_part_of_the_work() -> None:
    """The maintained plugins run: a format only they know is found."""
    # Twilio account SIDs are not in our own rules.
    assert secrets.scan("sid AC0123456789abcdef0123456789abcdef") != []
    kinds = {f.kind for f in secrets.scan("AKIAQ3EGUXK7NZ4VB2TD and ghp_R2d4F6h8J0k2L4m6N8p0Q2r4S6t8V0w2X4y6")}
    assert "AWS Access Key" in kinds or "GitHub Token" in kinds


@pytest.mark.parametrize(
    "text",
    [
        "token_ttl = 3600",
        "password_rotation = 90 days",
        "rotate the password every 90 days",
        "the token is required for every deploy",
        "The release commit is 3f9a1c2b7d4e5f60718293a4b5c6d7e8f9012345",
        "request id 123e4567-e89b-12d3-a456-426614174000",
        "test_memory_poisoning_corpus_values_are_big",
        "Keep max_tokens at 4096 for the 32k model",
        "SELECT id, name FROM users WHERE id = %s",
        "The API key is stored in 1Password under 'prod-api'",
        "sk-learn is not a key, scikit-learn is a library",
        "Bearer tokens expire after 15 minutes",
        "see https://docs.example.com/guide?page=2",
        "branch feature/JIRA-1234-add-OAuth2-login-flow",
        "the HttpClientFactoryV2ForAzureBlob3 wrapper",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert secrets.redact(text) == text


def test_keys_never_carry_secret_material() -> None:
    assert secrets.key_holds_secret("api_key_sk_live_51hqz8klm2np4qr6st8uv0wx2yz")
    assert secrets.key_holds_secret("token_ghp_r2d4f6h8j0k2l4m6n8p0")
    assert secrets.key_holds_secret("note_q8z3lm2kp4rt6vw8nb0x")
    for key in ("api_key", "token_ttl", "password_rotation", "release_commit_3f9a1c2b7d4e5f60718293a4"):
        assert not secrets.key_holds_secret(key), key


def db_bytes(paths: Paths) -> bytes:
    """The database with its WAL, as bytes on disk."""
    return b"".join(p.read_bytes() for p in paths.home.glob("qwenmem.db*") if p.is_file())


async def test_no_secret_reaches_the_table_an_export_or_the_debug_log(
    mem_paths: Paths, service: MemoryService, caplog: pytest.LogCaptureFixture
) -> None:
    log_file = debuglog.configure(mem_paths, "secrets-test", env={})
    assert log_file is not None
    try:
        results = []
        refused: list[str] = []
        for fmt in SECRETS:
            # The user's own words through /remember: kept without the secret, or refused
            # with the reason when nothing but the secret would be left ...
            try:
                results.append(await service.remember(RememberRequest(f"remember {fmt.text}", project=PROJECT)))
            except MemoryRejected as exc:
                assert "holds a secret" in str(exc)
                refused.append(fmt.name)
            # ... and the model's save_memory, with the secret in a file it read.
            results.append(
                await service.save(
                    WriteRequest(
                        "project",
                        "deploy_note_" + re.sub(r"[^a-z0-9]+", "_", fmt.name.lower()).strip("_"),
                        f"Deploy note: {fmt.text}",
                        origin=Origin.TOOL,
                        project=PROJECT,
                        provenance=Provenance.from_messages([], [f"config:\n{fmt.text}"]),
                    )
                )
            )
            # A log line quoting it (tracebacks and provider errors do).
            logging.getLogger("qwenmem.test").warning("provider said: %s", fmt.text)
        export = "\n".join(await export_lines(service))
    finally:
        debuglog.reset()
    data = db_bytes(mem_paths).decode("utf-8", "replace")
    log_text = log_file.read_text()
    for fmt in SECRETS:
        assert not leaked(fmt, data), f"{fmt.name} in the database"
        assert not leaked(fmt, export), f"{fmt.name} in the export"
        assert not leaked(fmt, log_text), f"{fmt.name} in the debug log"
    for result in results:
        assert secrets.REDACTED in result.memory.value
        assert FLAG_SECRET_REDACTED in result.memory.flags
        assert not secrets.key_holds_secret(result.memory.key), result.memory.key
    # The user's own notes stay active: only the secret went.
    remembered = [r for r in results if r.memory.origin == Origin.USER]
    assert all(r.memory.status is Status.ACTIVE for r in remembered)
    assert len(remembered) + len(refused) == len(SECRETS) and refused  # shells are refused


async def test_a_key_typed_into_remember_never_lands_in_the_key(service: MemoryService) -> None:
    result = await service.remember(RememberRequest("my api key for the billing sandbox is sk-abcdef0123456789abcdef01", project=PROJECT))
    assert "sk" not in result.memory.key.split("_") and "abcdef" not in result.memory.key
    assert result.memory.value == "my api key for the billing sandbox is [REDACTED]"
    assert result.memory.status is Status.ACTIVE


async def test_remembering_only_a_secret_is_refused_with_the_reason(service: MemoryService) -> None:
    with pytest.raises(MemoryRejected, match="holds a secret and little else"):
        await service.remember(RememberRequest("my OpenAI key is sk-proj-Zx81Kq0Lm3Nb5Vc7Xz9Aq2Ws4Ed6Rf8Tg0Yh", project=PROJECT))
    assert await service.list() == []


async def test_settings_keys_keep_their_values_and_approval_keeps_them(
    service: MemoryService,
) -> None:
    """token_ttl and password_rotation are settings, not secrets (issue 14)."""
    ttl = await service.save(
        WriteRequest("project", "token_ttl", "3600", origin="user", project=PROJECT)
    )
    rotation = await service.save(
        WriteRequest(
            "project", "password_rotation", "every 90 days", origin="user", project=PROJECT
        )
    )
    assert (ttl.memory.value, rotation.memory.value) == ("3600", "every 90 days")
    assert ttl.memory.flags == [] and rotation.memory.status is Status.ACTIVE


@pytest.mark.parametrize(
    "written",
    ["Authorization: Bearer {}", "my token {}", "https://me:{}@github.com/org/repo", "token = {}"],
)
def test_a_secret_is_named_by_its_issuer_not_by_how_it_was_written(written: str) -> None:
    """The secret-confirm dialog called a GitHub token "(Authorization header)": where an
    issuer's rule and a rule for how it was written cover one span, the issuer names it
    (fails without: Authorization header / Basic Auth Credentials / credential assignment)."""
    token = "ghp_" + "a1B2" * 9
    found = secrets.scan(written.format(token))
    assert [f.kind for f in found] == ["GitHub token"]
    assert found[0].start == written.index("{}")


# A password stated in the words of a language other than the five the first rule read:
# stored verbatim by /remember before (e2e7's sweep: "Hasło do wifi to hunter2hunter2"
# was `project/has_o` holding the password).
PASSWORDS_IN_WORDS = [
    ("pl", "Hasło do wifi to hunter2hunter2", "hunter2hunter2"),
    ("tr", "Wifi şifresi Zx9kQ2mPw77 olarak değişti", "Zx9kQ2mPw77"),
    ("sv", "Lösenordet till routern är Zx9kQ2mPw77", "Zx9kQ2mPw77"),
    ("ru", "Пароль от почты — Zx9kQ2mPw77", "Zx9kQ2mPw77"),
    ("uk", "Мій пароль до пошти: qwerty2024!", "qwerty2024!"),
    ("cs", "Heslo k serveru je Tr0ub4dor", "Tr0ub4dor"),
    ("vi", "Mật khẩu wifi là hunter2hunter2", "hunter2hunter2"),
    ("id", "Kata sandi email saya adalah rahasia99x", "rahasia99x"),
    ("fi", "Salasana on kissa123koira", "kissa123koira"),
    ("el", "Ο κωδικός του wifi είναι Zx9kQ2mPw77", "Zx9kQ2mPw77"),
    ("he", "הסיסמה לוויפי היא Zx9kQ2mPw77", "Zx9kQ2mPw77"),
    ("ar", "كلمة المرور للراوتر هي Zx9kQ2mPw77", "Zx9kQ2mPw77"),
    ("hi", "मेरा पासवर्ड hunter2hunter2 है", "hunter2hunter2"),
    ("it", "La password del wifi è Zx9kQ2mPw77", "Zx9kQ2mPw77"),
    ("nl", "Het wachtwoord van de NAS is nas2024pw", "nas2024pw"),
    ("zh", "wifi的密码是Zx9kQ2mPw77", "Zx9kQ2mPw77"),
    ("ja", "パスワードはZx9kQ2mPw77です", "Zx9kQ2mPw77"),
    ("ko", "와이파이 비밀번호는 hunter2hunter2 입니다", "hunter2hunter2"),
]


@pytest.mark.parametrize(("lang", "text", "secret"), PASSWORDS_IN_WORDS, ids=[p[0] for p in PASSWORDS_IN_WORDS])
def test_a_password_named_in_any_language_is_cut_and_its_words_stay(lang: str, text: str, secret: str) -> None:
    redacted = secrets.redact(text)
    assert secret not in redacted and secrets.REDACTED in redacted, redacted
    assert text.split(secret)[0].strip()[:4] in redacted  # the words around it stay


@pytest.mark.parametrize(
    "text",
    [
        "Hasło zmieniamy co 90 dni",
        "Пароль меняется каждые 90 дней",
        "Lösenordet måste ha minst 12 tecken",
        "密码至少要有12个字符",
        "パスワードは毎月変更します",
        "Salasana vaihdetaan 90 päivän välein",
        "Heslo je uloženo v 1Password",
    ],
)
def test_a_password_policy_in_any_language_keeps_its_words(text: str) -> None:
    assert secrets.redact(text) == text
