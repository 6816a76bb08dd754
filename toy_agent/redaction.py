"""Keep secrets out of observations, trajectories and log files.

Tool output goes to a third-party LLM and into saved transcripts, so anything that looks like a
credential is replaced by [REDACTED] before it leaves the process: the run's own API keys,
values of secret-looking environment variables, well-known key formats, private key lines
seen without their BEGIN line, and literal values given to secret-named keys in .env, shell,
YAML, JSON, INI and TOML files. Names stay visible (`OPENAI_API_KEY=[REDACTED]`,
`"SecretAccessKey": "[REDACTED]"`) so the text still makes sense; code that only refers to
a secret (`token = get_token()`) is left alone.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from toy_agent.cuts import MARK
from toy_agent.messages import opaque_fields
from toy_agent.providers import key_variables

REDACTED = "[REDACTED]"
MIN_SECRET_LENGTH = 8  # shorter values would redact ordinary words
MIN_PASSWORD_LENGTH = 4  # after a password-named key even `hunter2` is a password
SECRET_NAME_PARTS = (
    "KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "AUTH",
    "PRIVATE", "SIGNATURE",
)  # fmt: skip
_NOT_SECRETS = frozenset({"true", "false", "enabled", "disabled", "none", "null", "undefined"})

# Where the tools cut long text: a key cut there is redacted from a shorter visible head.
_CUT_AT = rf"[ \t\n]?{re.escape(MARK)}|[ \t]?…"  # the cut note, or a plain "…"
_CUT_END = rf"(?={_CUT_AT}|\Z)"
_TOKEN_CHAR, _ALNUM = r"[\w-]", "[A-Za-z0-9]"
# Where a key may start: not inside a word, nor right after a [REDACTED] (so that redacting
# twice gives what redacting once gave).
_AFTER_WORD = r"(?<![\w\]-])"


def _holds(chars: str, kinds: str = r"\d [A-Z] [a-z]") -> str:
    """A look-ahead: the run of `chars` ahead holds one of each of `kinds` (by default a digit,
    an upper and a lower case letter: random, not a word or a slug)."""
    return "".join(rf"(?={chars}*?{kind})" for kind in kinds.split())


def _run(chars: str, full: int, cut: int) -> str:
    """`full` or more of `chars`, or at least `cut` of them where the text was cut short."""
    return f"(?:{chars}{{{full},}}|{chars}{{{cut},}}{_CUT_END})"


# A key name that says its value is a secret: DB_PASSWORD, clientSecret, x-api-key, SMTP_PASS,
# spring.datasource.password; not tokenizer, max_tokens, secretary, bypass, Token.Comment.
_SECRET_NAME = (
    r"(?:(?i:passw(?:or)?d|passphrase|secret|token|credentials?"
    r"|(?:api|access|private|secret)[_-]?key)|(?<![A-Za-z])(?i:pass)|(?<=[a-z])Pass)"
    r"(?![a-z])(?!S(?![A-Z]))"
)
# A line that is one run of base64 and nothing else but a `path:line:` or `  12 | ` prefix: the
# body of a PEM or OpenSSH private key seen without its BEGIN line. It has digits, upper and
# lower case letters, two of each (hex numbers, words and paths rarely have all three).
_LINE_PREFIX = r"[ \t]*(?:(?:(?:[^\s:|\]]+[:-])?\d+(?:[:-]| \|)|[^\s:|\]]+:)[ \t]*)?"
_KEY_LINE = (
    rf"(?<![^\n])(?P<key_line_pre>{_LINE_PREFIX})"
    r"(?=[A-Za-z+/]*\d[A-Za-z+/]*\d)(?=[a-z0-9+/]*[A-Z][a-z0-9+/]*[A-Z])"
    r"(?=[A-Z0-9+/]*[a-z][A-Z0-9+/]*[a-z])"
    rf"[A-Za-z0-9+/]{{40,}}={{0,2}}(?=[ \t\r]*(?:\n|\Z)|{_CUT_AT})"
)
# `NAME = value` in .env, shell, YAML, JSON, INI, TOML or code, for a secret-looking NAME. Only
# the value is redacted, and only if it is a literal: _assigns_literal() leaves code alone.
_ASSIGNMENT = (
    r"(?P<assignment_pre>(?<![\w.\]-])(?=[\w.-]+[\"']?\]?[ \t]*[:=])"  # cheap test first
    rf"(?P<assignment_name>(?=[\w.-]*?{_SECRET_NAME}[\w-]*(?![\w.-]))[\w.-]+)"
    r"[\"']?\]?(?P<assignment_sep>[ \t]*(?::=|=>|[:=])(?![=:])[ \t]*)(?P<assignment_quote>[\"'])?)"
    r"(?P<assignment_value>(?(assignment_quote)(?:\\.|(?!(?P=assignment_quote))[^\\\n…])*"
    r"|(?:[^\s\"'`\\…]|\\(?![nrt\"'\\]))*[^\s\"'`\\…,;:.)\]}]))"  # not "…\n" in a string
    rf"(?P<assignment_post>(?(assignment_quote)(?:(?P=assignment_quote)|{_CUT_END})|))"
)
_PRIVATE_KEY = r"-----{} [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"

# Keys known by how they begin. A distinctive prefix (sk-ant-, AIza, github_pat_, glpat-, xoxb-,
# AKIA ...) is a key wherever it starts, even glued to the text before it (`…ffffsk-ant-…`);
# a short, generic one (sk-, hf_, ghp_, npm_, sk_test_ ...) only at the start of a word, or,
# glued, when its body has the full length and looks random (a digit, an upper and a lower case
# letter: `task-runner-…` or `behalf_OfTheUser…` stay as they are). A body made of letters and
# digits takes what is glued after it too: where a key glued on both sides ends is unknowable.
# Two alternations in one rule: the regex engine skips each at a glance where none of its first
# letters is (as rules of their own they cost twice the time).
_GLUED = r"[\w-]*"  # what is glued after a key whose body is letters and digits
_STRIPE = r"(?:[sr]k_live|whsec)_"
_SENDGRID_CHAR = r"[\w.-]"
_ANYWHERE_KEYS = (
    rf"sk-(?:ant|proj|svcacct|admin|None)-{_holds(_TOKEN_CHAR)}{_run(_TOKEN_CHAR, 32, 20)}",
    rf"sk-{_holds(_ALNUM)}{_ALNUM}{{40,}}{_GLUED}",  # OpenAI's older keys: sk- and 48
    rf"AIza{_run(_TOKEN_CHAR, 35, 10)}",  # Google API key
    r"ya29\.[\w-]{20,}",  # Google OAuth access token
    rf"gh[pousr]_{_holds(_ALNUM)}{_ALNUM}{{36,}}{_GLUED}",  # GitHub
    rf"github_pat_\w{{22,}}{_GLUED}",
    rf"gl(?:pat|ptt|dt|rt)-{_run(_TOKEN_CHAR, 20, 10)}",  # GitLab
    rf"hf_{_holds(_ALNUM, '[A-Z] [a-z]')}{_ALNUM}{{30,}}{_GLUED}",  # Hugging Face: letters
    rf"npm_{_holds(_ALNUM)}{_ALNUM}{{36,}}{_GLUED}",
    rf"pypi-AgE{_run(_TOKEN_CHAR, 40, 10)}",
    rf"(?:{_STRIPE}|[sr]k_test_){_holds(_ALNUM)}{_ALNUM}{{20,}}{_GLUED}",  # Stripe
    rf"SG\.{_holds(_SENDGRID_CHAR)}[\w-]{{22}}\.[\w-]{{43}}",  # SendGrid
    r"eyJ[\w-]{8,}\.eyJ[\w-]*(?:\.[\w-]*)?",  # JWT: header.payload.signature
    r"xox[abeprs]-[A-Za-z0-9-]{10,}",  # Slack
    # An AWS key id, with its secret if it follows as in the accessKeys.csv of the console.
    r"(?:AKIA|ASIA)[A-Z0-9]{16}"
    r"(?:[ \t]*[,;\t|][ \t]*[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+]))?",
)
_WORD_START_KEYS = (  # the same, and the shorter ones, seen at the start of a word
    rf"sk-(?=[\w-]*\d){_run(_TOKEN_CHAR, 32, 20)}",  # OpenAI sk-, sk-proj-; Anthropic sk-ant-
    rf"gh[pousr]_{_run(_ALNUM, 36, 10)}{_GLUED}",
    rf"hf_{_run(_ALNUM, 30, 10)}{_GLUED}",
    rf"npm_{_run(_ALNUM, 36, 10)}{_GLUED}",
    rf"(?:{_STRIPE}|[sr]k_test_){_run(_ALNUM, 20, 10)}{_GLUED}",
    r"SG\.[\w-]{16,}\.[\w-]{20,}",  # SendGrid
    r"xapp-[A-Za-z0-9-]{10,}",  # Slack
)

# Well-known formats. A group named <rule>_pre / <rule>_post stays visible around [REDACTED].
_FORMATS = {
    # Certificates and public keys are not secrets: matched only to be kept as they are.
    "public_pem": r"-----BEGIN (?P<public_pem_label>[A-Z0-9 ]*(?:CERTIFICATE|PUBLIC KEY)"
    r"(?: REQUEST| BLOCK)?)-----\r?\n(?:[\w-]+: [^\n]*\n)*[A-Za-z0-9+/=\s]*"
    r"-----END (?P=public_pem_label)-----",
    # A private key: the BEGIN line ends its line (or a JSON string's line: \n), then anything
    # up to END, or key-like text up to where the text was cut. Or it was redacted already.
    "pem": rf"(?P<pem_pre>{_PRIVATE_KEY.format('BEGIN')})(?=[ \t\r]*(?:\n|\\[nr])|\[REDACTED])"
    rf"(?:[\s\S]*?(?P<pem_post>{_PRIVATE_KEY.format('END')})|(?:[\w+/=\s|:.-]|\\[nr])*{_CUT_END})",
    "key_line": _KEY_LINE,
    "prefixed_key": rf"(?:{'|'.join(_ANYWHERE_KEYS)})"
    rf"|{_AFTER_WORD}(?:{'|'.join(_WORD_START_KEYS)})",
    "aws_secret": r"(?P<aws_secret_pre>(?i:aws_secret_access_key)[\"']?\s*[:=]\s*[\"']?)"
    r"[A-Za-z0-9/+]{40}",
    "slack_webhook": r"(?P<slack_webhook_pre>https://hooks\.slack\.com/(?:services|workflows)/)"
    r"[A-Za-z0-9/_-]{8,}",
    "bearer": rf"(?P<bearer_pre>{_AFTER_WORD}[Bb]earer\s+)" + _run(r"[\w~+/.=-]", 16, 8),
    "basic_auth": r"(?P<basic_auth_pre>(?i:authorization)[\"']?[ \t]*[:=][ \t]*[\"']?"
    r"[Bb]asic[ \t]+)[A-Za-z0-9+/]{8,}={0,2}",
    # The scheme's length is bounded: unbounded, `a.a.a.a…` took quadratic time.
    "url_password": rf"(?P<url_password_pre>{_AFTER_WORD}[a-z][a-z0-9+.-]{{0,31}}://[^\s:/@]+:)"
    r"[^\s@/]+(?=@)",
    "assignment": _ASSIGNMENT,
}

# What a secret-named key is given when it is not a secret (see _assigns_literal).
_NOT_VALUES = _NOT_SECRETS | {
    "nil", "yes", "no", "on", "off", "optional", "required", "str", "string", "bytes", "int",
    "float", "bool", "boolean", "number", "object", "any", "dict", "list", "unknown", "secretstr",
}  # fmt: skip
_PLACEHOLDER = re.compile(
    r"(?i)x+|\*+|\.+|-+|<[^<>]*>|\[REDACTED\]|change[_-]?me|replace[_-]?me|placeholder|redacted"
    r"|your[\w.-]*|[\w.-]*[_-]here|(?:api[_-]?)?(?:pass(?:word|wd|phrase)?|secret|token|key)"
)
_REFERENCE = re.compile(r"\$[A-Za-z_]\w*|\$\d|%\w+%|.*?(?:\$[{(]|\{\{|\{\w*\}|%\(\w+\)s).*")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
_URL = re.compile(r"[A-Za-z][\w+.-]*://\S*")  # url_password and the key formats look inside
_VARIABLE_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")  # "OPENAI_API_KEY"
_NOT_A_SECRET_NAME = re.compile(
    r"(?i)(?:file|path|dir|url|uri|endpoint|name|type|header|pattern|placeholder|method"
    r"|algorithm|encryption|policy)$"
)  # TOKEN_URL, PASSWORD_FILE, password_encryption: where or what kind, not the secret
# A call, an index, a generic type or a member: get_token(), os.environ[, self.token.
_CODE = re.compile(
    r"[(\[{<]|[$A-Za-z_][\w.:>$-]*[(\[{<]|[$A-Za-z_]\w*(?:(?:\.|->|::)[A-Za-z_]\w*)+(?![\w.])"
)
_SECRET_NAME_RE = re.compile(_SECRET_NAME)
_WORD = re.compile(r"[A-Za-z_]\w*")
_MEMBER = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")  # "google.auth.credentials.Credentials"
_RANDOM = re.compile(r"\d|[a-z][A-Z]|[+=!@#$%^&*~?]")  # wJalrXUtnFEMI, not Confidential-client
# scheme://user:password@host (DATABASE_URL, PIP_EXTRA_INDEX_URL's token), or a long key as the
# user part (SENTRY_DSN): not ssh://git@host.
_CREDENTIAL_URL = re.compile(r"[A-Za-z][\w+.-]*://(?:[^\s/@:]*:[^\s/@]+|[^\s/@:]{16,})@\S+")
_LINE_END = re.compile(rf"[ \t]*(?:#.*)?(?:\r?\n|\Z)|{_CUT_AT}")


def is_secret_variable(name: str, value: str) -> bool:
    """A secret-looking name with a value worth hiding (not trivial, not a number, not a path),
    or, whatever the name, a URL that carries credentials (DATABASE_URL, SENTRY_DSN)."""
    if _CREDENTIAL_URL.fullmatch(value):
        return True
    upper = name.upper()
    if not any(part in upper for part in SECRET_NAME_PARTS):
        return False
    if len(value) < MIN_SECRET_LENGTH or value.lower() in _NOT_SECRETS or value.isdigit():
        return False
    try:
        return not os.path.exists(value)  # e.g. SSH_AUTH_SOCK, XAUTHORITY
    except (ValueError, OSError):
        return True


def mask_key(text: str, key: str, mask: str = "***") -> str:
    """`text` with the API key `key` masked, for a provider's error message (which may echo
    the key). A key under MIN_SECRET_LENGTH characters (`OPENAI_API_KEY=x`, common with local
    servers that ignore it) is masked only where it stands as a whole token, never inside
    words: masking every `x` would garble the message and protect nothing."""
    if not key:
        return text
    if len(key) >= MIN_SECRET_LENGTH:
        return text.replace(key, mask)
    return re.sub(rf"(?<![\w.\-/]){re.escape(key)}(?![\w\-/]|\.\w)", mask, text)


class Redactor:
    """Replaces secrets in text with [REDACTED], in one pass of one compiled regex."""

    def __init__(self, secrets: Iterable[str] = (), environ: Mapping[str, str] | None = None):
        """Redacts `secrets`, every provider's key found in `environ` (whatever it looks like),
        and the values of its other secret-looking variables."""
        environ = os.environ if environ is None else environ
        keys = key_variables()
        self._secrets = {
            value
            for name, value in environ.items()
            if (name in keys and len(value) >= MIN_SECRET_LENGTH) or is_secret_variable(name, value)
        }
        self._regex: re.Pattern[str] | None = None
        for secret in secrets:
            self.add_secret(secret)

    def add_secret(self, value: str) -> None:
        """Redact this exact value from now on (ignored if shorter than MIN_SECRET_LENGTH)."""
        if len(value) >= MIN_SECRET_LENGTH and value not in self._secrets:
            self._secrets.add(value)
            self._regex = None

    def redact(self, text: str) -> str:
        """Idempotent: redacting redacted text changes nothing."""
        if not text:
            return text
        if self._regex is None:
            self._regex = self._compile()
        parts, done, pos = [], 0, 0
        while match := self._regex.search(text, pos):
            if match.lastgroup == "assignment" and not _assigns_literal(match):
                pos = match.end("assignment_pre")  # code, not a secret: scan its value as text
                continue
            parts += [text[done : match.start()], self._replace(match)]
            done = pos = match.end()
        return "".join(parts) + text[done:] if parts else text

    def redact_obj(self, obj: Any) -> Any:
        """Redact every string in a JSON-like structure (dicts, lists, tuples), keys included,
        but the opaque fields of a signed turn (a thinking block's signature, a thought
        signature, encrypted reasoning: `messages.opaque_fields`), which go back to the provider
        byte for byte and hold no text. A signed block whose text redaction changed loses them:
        its signature no longer fits it, and a provider refuses a broken one."""
        if isinstance(obj, str):
            return self.redact(obj)
        if isinstance(obj, dict):
            opaque = opaque_fields(obj)
            out = {self.redact_obj(k): self.redact_obj(v) if k not in opaque else v
                   for k, v in obj.items()}  # fmt: skip
            if opaque and any(out.get(k) != v for k, v in obj.items() if k not in opaque):
                return {k: v for k, v in out.items() if k not in opaque}
            return out
        if isinstance(obj, (list, tuple)):
            return type(obj)(self.redact_obj(item) for item in obj)
        return obj

    def _compile(self) -> re.Pattern[str]:
        rules = [f"(?P<{name}>{rx})" for name, rx in _FORMATS.items()]
        if self._secrets:  # longest first, so a secret containing another is hidden whole
            literals = "|".join(re.escape(s) for s in sorted(self._secrets, key=len, reverse=True))
            rules.insert(0, f"(?P<literal>{literals})")
        return re.compile("|".join(rules))

    def _replace(self, match: re.Match[str]) -> str:
        rule = match.lastgroup
        if rule == "public_pem":
            return match.group()
        groups = match.groupdict()  # a _pre or _post group that did not take part is None
        # What stays visible is redacted too: https://ghp_…:x-oauth-basic@github.com
        pre = self.redact(groups.get(f"{rule}_pre") or "")
        return f"{pre}{REDACTED}{groups.get(f'{rule}_post') or ''}"


def _assigns_literal(match: re.Match[str]) -> bool:
    """Whether a secret-named key is given a literal rather than code, a reference or a
    placeholder: `password: hunter2` and `"client_secret": "Gx7..."` are redacted;
    `password = request.form["password"]`, `token = self.token`, `API_TOKEN=${API_TOKEN}`,
    `api_key: <your-key>` and `"refresh_token": "refreshToken"` are not."""
    name, value = match["assignment_name"], match["assignment_value"]
    password = "pass" in name.lower()
    if len(value) < (MIN_PASSWORD_LENGTH if password else MIN_SECRET_LENGTH):
        return False
    if (
        value.lower() in _NOT_VALUES
        or any(rx.fullmatch(value) for rx in (_PLACEHOLDER, _REFERENCE, _NUMBER, _URL))
        or _VARIABLE_NAME.fullmatch(value)
        or (_WORD.fullmatch(value) and _SECRET_NAME_RE.search(value))  # a name: "refresh_token"
        or _NOT_A_SECRET_NAME.search(name)
        or value.startswith("-----BEGIN")  # the pem rule takes the whole block
    ):
        return False
    if not password and not _RANDOM.search(value):  # "my-api-key", "auth-request-type/at"
        return False
    if match["assignment_quote"]:
        return not _MEMBER.fullmatch(value)
    if _CODE.match(value):
        return False
    if not _WORD.fullmatch(value):  # s3cr3t!, wJalrXUtnFEMI/K7MDENG+bPxRfiCY
        return True
    if "_" in value:  # a variable: user_password, _IMDSV2_SESSION_TOKEN
        return False
    if any(c.isdigit() for c in value):  # hunter2, not a variable name
        return True
    # Letters only: a variable in code (`password = pw`), a literal in .env and YAML files.
    sep, end = match["assignment_sep"], match.end()
    if sep == "=":  # DB_PASSWORD=letmein, not a keyword argument f(password=password)
        return name.upper() == name and match.string[end : end + 1] not in (",", ")")
    at_line_end = _LINE_END.match(match.string, end) is not None
    return sep.strip() == ":" and value.islower() and at_line_end  # YAML `password: letmein`


class RedactingFilter(logging.Filter):
    """Redacts each record (message with its args, and any traceback) before it is written.

    Attach it to handlers, not loggers: a logger's filters do not see propagated records.
    """

    def __init__(self, redactor: Redactor):
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # bad format args: let logging report it as usual
            return True
        record.msg, record.args = self.redactor.redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redactor.redact(record.stack_info)
        return True
