"""The one secret scanner: memory writes, the debug log, the prompt history, session
titles and the file tools use it (a base module: it imports nothing of qwenmem).

Detection is Yelp's ``detect-secrets`` (its maintained provider plugins: AWS, Stripe,
GitHub, GitLab, Slack, Azure storage, basic-auth URLs, JWT, npm, SendGrid, Telegram,
Twilio, …) run in-process on the text, plus rules of our own for what it lacks or
matches too narrowly (Anthropic, OpenAI project keys, Hugging Face, Google OAuth,
whole PEM blocks, ``Authorization:`` headers, "the password for admin is …" and
"Hasło do wifi to …" / "wifi的密码是…" in some thirty languages, random high-entropy
runs). It finds *spans*: ``redact`` replaces only the secret, so
``token_ttl = 3600`` or "rotate the password every 90 days" stay as written.

Importing detect-secrets costs 0.2 s idle, over 1 s on a loaded machine, so the
plugins load on first use — or, in a long-lived process, in a background thread
started by ``preload()`` (the debug log starts it). Until they are loaded, a caller
that must not wait (a log line written on the event loop) passes ``complete=False``
and gets our own rules, which cover the common formats; memory writes always wait
for the complete scanner.
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

REDACTED = "[REDACTED]"

# detect-secrets plugins used as they are. Left out: IPPublicDetector (an address is
# not a credential), KeywordDetector (tuned for source files; the keyword rules below
# work on prose), the entropy plugins (they only look inside quotes; see _entropic).
_PLUGINS = (
    "artifactory.ArtifactoryDetector",
    "aws.AWSKeyDetector",
    "azure_storage_key.AzureStorageKeyDetector",
    "basic_auth.BasicAuthDetector",
    "cloudant.CloudantDetector",
    "discord.DiscordBotTokenDetector",
    "github_token.GitHubTokenDetector",
    "gitlab_token.GitLabTokenDetector",
    "ibm_cloud_iam.IbmCloudIamDetector",
    "ibm_cos_hmac.IbmCosHmacDetector",
    "jwt.JwtTokenDetector",
    "mailchimp.MailchimpDetector",
    "npm.NpmDetector",
    "openai.OpenAIDetector",
    "private_key.PrivateKeyDetector",
    "pypi_token.PypiTokenDetector",
    "sendgrid.SendGridDetector",
    "slack.SlackDetector",
    "softlayer.SoftlayerDetector",
    "square_oauth.SquareOAuthDetector",
    "stripe.StripeDetector",
    "telegram_token.TelegramBotTokenDetector",
    "twilio.TwilioKeyDetector",
)

# Our own rules: (kind, pattern, group). ``group`` is the part that is secret (0: all),
# so "password: hunter2" keeps "password: " and loses only "hunter2".
_VALUE = r"[^\s\"'`,;<>()\[\]{}]"  # one character of a bare credential
# "Password" in the languages qwenmem's users write (the credential's name, so a value
# after it is read as the credential): word starts, and those written inside a word.
_PASSWORD_WORDS = (
    r"password|passwort|kennwort|passphrase|contraseña|mot de passe|senha|wachtwoord|hasł[oa]|haslo"
    r"|hesl[oa]|lösenord|losenord|salasana|şifre|sifre|parola|parolă|passord|adgangskode|jelszó"
    r"|парол|κωδικ|συνθηματικ|كلمة (?:المرور|السر)|पासवर्ड|mật khẩu|mat khau|kata (?:sandi|laluan)"
)
_PASSWORD_INNER = r"密码|密碼|口令|パスワード|暗証番号|비밀번호|암호|סיסמ"
# Compiled on first use (`_rules`): the ~30 patterns cost ~5 ms of CPU, and the TUI
# imports this module before its first frame (the debug log, the prompt history).
_RULE_SOURCES: tuple[tuple[str, str, int, int], ...] = (
    (
        "private key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----[\s\S]*?(-----END [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----|\Z)",
        0,
        0,
    ),
    ("Anthropic key", r"\bsk-ant-[A-Za-z0-9_-]{16,}", 0, 0),
    ("OpenAI key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{12,}", 0, 0),
    ("Hugging Face token", r"\bhf_[A-Za-z0-9]{20,}", 0, 0),
    ("npm token", r"\bnpm_[A-Za-z0-9]{30,}", 0, 0),
    ("SendGrid key", r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}", 0, 0),
    ("Telegram bot token", r"\b\d{8,10}:[A-Za-z0-9_-]{30,}", 0, 0),
    ("Google OAuth token", r"\bya29\.[A-Za-z0-9_-]{20,}", 0, 0),
    ("Google OAuth secret", r"\bGOCSPX-[A-Za-z0-9_-]{20,}", 0, 0),
    ("Google API key", r"\bAIza[0-9A-Za-z_-]{35}", 0, 0),
    ("Azure connection string", r"\b(?:AccountKey|SharedAccessKey|SharedAccessSignature)=([^;\s\"']{8,})", re.I, 1),
    ("Slack token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}", 0, 0),
    ("Slack webhook", r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/]+", 0, 0),
    ("Discord webhook", r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_-]+", 0, 0),
    ("GitHub token", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{20,})", 0, 0),
    ("GitLab token", r"\bgl(?:pat|dt|ft|rt|soat|cbt|ptt|agent|oas)-[A-Za-z0-9_-]{20,}", 0, 0),
    ("Stripe key", r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}", 0, 0),
    ("Stripe webhook secret", r"\bwhsec_[A-Za-z0-9]{20,}", 0, 0),
    ("AWS access key", r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b", 0, 0),
    (
        "AWS secret key",
        r"\baws_?secret_?(?:access_?)?key\b[\"']?\s*(?:[:=]|is)\s*[\"']?([A-Za-z0-9/+=]{40})",
        re.I,
        1,
    ),
    ("JSON Web Token", r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", 0, 0),
    ("Authorization header", r"\b(?:Basic|Bearer|Token|Digest)\s+([A-Za-z0-9._~+/=-]{12,})", re.I, 1),
    ("credentials in a URL", r"\b[a-z][a-z0-9+.-]*://[^\s:/@]*:([^\s@/]+)@", re.I, 1),
    (
        "password",
        # "password: x", "the password for admin is x", "passwort ist x", "pw=x"
        r"\b(?:password|passwd|passwort|passphrase|contraseña|mot de passe|senha|pwd|pw)"
        r"(?:\s+(?:for|of|to|de|für|do|da)\s+[^\s:=]{1,40})?"
        r"\s*(?:[:=]|\bis\b|\bist\b|\bes\b|\best\b|\bé\b)\s*[\"']?(" + _VALUE + r"{4,})",
        re.I,
        1,
    ),
    (
        "credential assignment",
        # api_key=..., client-secret: ..., "my api key is ..." — a value with a digit
        # or symbol, so "the token is required" keeps its words.
        r"\b(?:api[_ -]?key|apikey|secret(?:[_ -]?key)?|client[_ -]?secret|access[_ -]?token"
        r"|auth[_ -]?token|refresh[_ -]?token|bearer[_ -]?token|private[_ -]?key|token)"
        r"[\"']?\s*(?:[:=]|\bis\b)\s*[\"']?((?=" + _VALUE + r"*[0-9_+/=-])" + _VALUE + r"{8,})",
        re.I,
        1,
    ),
    (
        # A password named in the words of any language, then within a few words a
        # credential-shaped value: "Hasło do wifi to hunter2hunter2", "wifi的密码是
        # Zx9kQ2mPw77", "Lösenordet till routern är …". The value starts with a letter or
        # symbol and holds a digit, so "Hasło zmieniamy co 90 dni" and "… v 1Password"
        # keep their words. CJK and Hebrew nouns sit inside words (的密码, הסיסמה).
        "password",
        r"(?:(?<!\w)(?:" + _PASSWORD_WORDS + r")\w*|" + _PASSWORD_INNER + r")"
        r"[^\n.!?\u3002\uff01\uff1f]{0,40}?(?<![A-Za-z0-9])"
        r"((?=[A-Za-z!@#$%^&*+=_~-])(?=[A-Za-z0-9!@#$%^&*+=_~-]*\d)[A-Za-z0-9!@#$%^&*+=_~-]{6,})(?![A-Za-z0-9])",
        re.I,
        1,
    ),
    ("npm auth token", r"_authToken\s*=\s*(\S+)", 0, 1),
    (
        # "the db pass is c3Vw…", "pass: x1y2" — bare "pass" only with a digit or
        # symbol in the value, so "the build pass is green" keeps its words.
        "password",
        r"\bpass(?:code|word)?\s*(?:[:=]|\bis\b)\s*[\"']?((?=" + _VALUE + r"*[0-9_+/=!@#$%^&*-])" + _VALUE + r"{4,})",
        re.I,
        1,
    ),
    (
        # "my PIN is 4821", "passcode: 902113", "unlock code = 5521"
        "PIN",
        r"\b(?:pin(?:\s*code)?|passcode|pass\s+code|security\s+code|unlock\s+code)\s*(?:[:=]|\bis\b)\s*[\"']?(\d{4,12})(?![\w.])",
        re.I,
        1,
    ),
    (
        "PIN",
        r"\b(?:passcode|pass\s+code|security\s+code|unlock\s+code)\s*(?:[:=]|\bis\b)\s*[\"']?((?=\S*\d)" + _VALUE + r"{4,})",
        re.I,
        1,
    ),
    (
        # mysql -u root -pS3cret (no space: the password itself), --password secret,
        # sshpass -p secret. "-p8080" elsewhere is a port and is left alone.
        "command-line password",
        r"\b(?:mysql\w*|mariadb\w*|mysqldump|mysqladmin|mysqlimport|mysqlsh)\b[^\n|;&]*?\s-p([^\s'\"]{3,})",
        0,
        1,
    ),
    ("command-line password", r"\bsshpass\s+-p\s*[\"']?([^\s'\"]{3,})", 0, 1),
    ("command-line password", r"(?:^|\s)--pass(?:word)?(?:=|\s+)[\"']?([^\s'\"-][^\s'\"]{3,})", re.M, 1),
    (
        # "admin / Tr0ub4dor&3": a login and a password with a digit or symbol.
        "login / password",
        r"(?<![\w/.:-])[A-Za-z][\w.@-]{1,40}\s+/\s+((?=[^\s/]*[A-Za-z])(?=[^\s/]*[0-9!@#$%^&*?+=~])[^\s/]{6,})(?![\w/])",
        0,
        1,
    ),
    (
        # "API key 9f8e7d6c…": a long key right after its name, no "is" needed.
        "key after its name",
        r"\b(?:api[_ -]?key|apikey|secret(?:[_ -]key)?|access[_ -]key|auth[_ -]key|license[_ -]key"
        r"|private[_ -]key|token)s?\b(?:\s+(?:is|was))?\s*[:=]?\s*[\"']?([0-9a-fA-F]{24,}|[A-Za-z0-9+/_-]{32,}={0,2})",
        re.I,
        1,
    ),
)


@functools.cache
def _rules() -> tuple[tuple[str, re.Pattern[str], int], ...]:
    """Our rules, compiled: (kind, pattern, group)."""
    return tuple(
        (kind, re.compile(pattern, flags), group) for kind, pattern, flags, group in _RULE_SOURCES
    )


_ENTROPY_RUN = re.compile(r"(?<![A-Za-z0-9+/_=-])[A-Za-z0-9+/_=-]{24,}(?![A-Za-z0-9+/_=-])")
_ENTROPY_LIMIT = 4.3
_SEPARATORS = re.compile(r"[-_/+=]+")


@dataclass(frozen=True, order=True)
class Finding:
    """One secret in a text: where it is and what it looks like."""

    start: int
    end: int
    kind: str


def _entropy(text: str) -> float:
    counts: dict[str, int] = {}
    for ch in text:
        counts[ch] = counts.get(ch, 0) + 1
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def _entropic(text: str) -> Iterator[Finding]:
    """Random-looking runs: mixed case and digits, high Shannon entropy.

    Hex alone (commit hashes, UUIDs), snake_case identifiers and short words joined by
    separators never qualify: they lack the mixed case or the entropy, or they are
    names (vendor tokens with separators have rules of their own above).
    """
    for m in _ENTROPY_RUN.finditer(text):
        run = m.group()
        parts = _SEPARATORS.split(run)
        if len(parts) >= 3 and max(map(len, parts)) <= 12:
            continue  # words joined up: a branch, a path, a slug ("feature/JIRA-12-add-OAuth2")
        if (
            any(c.isupper() for c in run)
            and any(c.islower() for c in run)
            and sum(c.isdigit() for c in run) >= 2
            and _entropy(run) >= _ENTROPY_LIMIT
        ):
            yield Finding(m.start(), m.end(), "high-entropy string")


_loaded: list[tuple[str, Callable[[str], Iterable[str]]]] | None = None
_load_lock = threading.Lock()  # held for the whole import
_preload_lock = threading.Lock()  # never held long: preload() must not wait on an import
_preloading = False


def preload() -> None:
    """Load the plugins in a background thread, once, so no caller waits for them later."""
    global _preloading
    with _preload_lock:
        if _preloading or _loaded is not None:
            return
        _preloading = True
    threading.Thread(target=_plugins, name="secret-scanner-load", daemon=True).start()


def load() -> None:
    """Load the plugins now, waiting for them (call it from a thread: it imports)."""
    _plugins()


def _plugins() -> list[tuple[str, Callable[[str], Iterable[str]]]]:
    """detect-secrets' detectors as (kind, analyze_string), imported once."""
    global _loaded
    _rules()  # compiled here too: preload() runs this off the event loop
    with _load_lock:
        if _loaded is None:
            import importlib

            loaded = []
            for spec in _PLUGINS:
                module, name = spec.rsplit(".", 1)
                plugin = getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), name)()
                loaded.append((str(plugin.secret_type), plugin.analyze_string))
            _loaded = loaded
    return _loaded


def _occurrences(text: str, needle: str) -> Iterator[int]:
    start = text.find(needle)
    while start >= 0:
        yield start
        start = text.find(needle, start + 1)


# Kinds that say how a secret was written down, not whose it is.
_HOW_WRITTEN = frozenset(
    {"Authorization header", "Basic Auth Credentials", "credential assignment",
     "credentials in a URL", "password", "high-entropy string"}
)


def scan(text: str, *, complete: bool = True) -> list[Finding]:
    """Every secret span in ``text``, sorted, overlaps merged.

    ``complete=False`` never waits for detect-secrets to load: until it has, only our
    own rules run (and the load is started in the background).
    """
    if not text:
        return []
    if complete:
        plugins = _plugins()
    else:
        plugins = _loaded or []
        if _loaded is None:
            preload()
    found: list[Finding] = []
    for kind, analyze in plugins:
        for secret in analyze(text):
            if isinstance(secret, str) and len(secret) >= 6:
                found += [Finding(i, i + len(secret), kind) for i in _occurrences(text, secret)]
    for kind, pattern, group in _rules():
        for m in pattern.finditer(text):
            if m.group(group):
                found.append(Finding(m.start(group), m.end(group), kind))
    found += _entropic(text)
    merged: list[Finding] = []
    # Where spans meet, the first one's kind names the merged secret: at one start, a
    # rule that knows the issuer ("GitHub token") before one that knows only how it
    # was written ("Authorization header" for "Bearer ghp_…").
    for f in sorted(found, key=lambda f: (f.start, f.kind in _HOW_WRITTEN, -f.end, f.kind)):
        if merged and f.start < merged[-1].end:
            last = merged[-1]
            merged[-1] = Finding(last.start, max(last.end, f.end), last.kind)
        else:
            merged.append(f)
    return merged


def redact(text: str, *, complete: bool = True) -> str:
    """``text`` with every secret span replaced by ``[REDACTED]``; the rest untouched
    (``complete``: see :func:`scan`)."""
    findings = scan(text, complete=complete)
    if not findings:
        return text
    parts: list[str] = []
    at = 0
    for f in findings:
        parts += [text[at : f.start], REDACTED]
        at = f.end
    parts.append(text[at:])
    return "".join(parts)


MESSAGE_SCAN_CHARS = 200_000
"""How much of a chat message is scanned before it is sent: scanning 5 MB takes 15-20 s
on this hardware, and a pasted log's secrets sit in its start as often as anywhere."""


def redact_message(text: str) -> tuple[str, list[str]]:
    """A message as it may be sent and stored (its first MESSAGE_SCAN_CHARS redacted),
    and the kinds of secret found there (empty: ``text`` unchanged)."""
    head = text[:MESSAGE_SCAN_CHARS]
    found = scan(head, complete=False)
    if not found:
        return text, []
    return redact(head, complete=False) + text[MESSAGE_SCAN_CHARS:], [f.kind for f in found]


def redact_noted(text: str, shown: str) -> str:
    """``text`` (a file's, a tool's answer) as the model may read it: every secret span
    cut, and a first line saying how many were, so the model does not take
    ``[REDACTED]`` for the content (``shown``: what the text is, for that line)."""
    cleaned = redact(text)
    if cleaned == text:
        return text
    count = cleaned.count(REDACTED) - text.count(REDACTED)
    return f"({shown}: {count} secret value(s) replaced by {REDACTED}; never sent)\n{cleaned}"


def contains_secret(text: str) -> bool:
    return bool(scan(text))


_KEY_RUN = re.compile(r"[a-z0-9]{16,}")
_HEX = re.compile(r"[0-9a-f]+")
_KEY_PREFIXES = re.compile(
    r"(^|_)(sk_(live|test|proj|ant)|rk_live|ghp|gho|ghs|github_pat|glpat|xox[abposr]|akia[0-9a-z]{12}"
    r"|hf_[a-z0-9]{8}|npm_[a-z0-9]{8}|ya29|gocspx|eyj[a-z0-9]{8})"
)


# "db_password_tr0ub4dor3": a credential word, then a part that is no setting's name.
_KEY_AFTER_CREDENTIAL = re.compile(
    r"(?:^|_)(?:password|passwd|pass|pwd|passphrase|secret|token|api_?key|apikey|pin|passcode)_([a-z0-9_]+)$"
)


_DIGIT_THEN_LETTER = re.compile(r"[0-9][a-z]")


def key_holds_secret(key: str) -> bool:
    """A memory key names a subject; one holding key material (a random run, a vendor
    prefix, a password spelled after its name) would put the secret in every listing,
    export and prompt."""
    if _KEY_PREFIXES.search(key) or contains_secret(key):
        return True
    if after := _KEY_AFTER_CREDENTIAL.search(key):
        for part in after.group(1).split("_"):
            # Letters again after a digit ("hunter2hunter", "tr0ub4dor3"); names with
            # a number at the end ("base64", "sha256") are settings.
            if len(part) >= 6 and sum(c.isalpha() for c in part) >= 3 and _DIGIT_THEN_LETTER.search(part):
                return True
    for run in _KEY_RUN.findall(key):
        digits = sum(c.isdigit() for c in run)
        # Hex alone is a hash or an id (a commit, a UUID part), not key material.
        if digits >= 3 and len(run) - digits >= 3 and not _HEX.fullmatch(run):
            return True
    return False
