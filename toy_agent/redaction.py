"""Keep secrets out of observations, trajectories and log files.

Tool output goes to a third-party LLM and into saved transcripts, so anything that looks like a
credential is replaced by [REDACTED] before it leaves the process: the run's own API keys,
values of secret-looking environment variables, and well-known key formats. Variable names stay
visible (`OPENAI_API_KEY=[REDACTED]`) so the text still makes sense.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "[REDACTED]"
MIN_SECRET_LENGTH = 8  # shorter values would redact ordinary words
SECRET_NAME_PARTS = (
    "KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "AUTH",
    "PRIVATE", "SIGNATURE",
)  # fmt: skip
_NOT_SECRETS = frozenset({"true", "false", "enabled", "disabled", "none", "null", "undefined"})

# Well-known formats. A group named <rule>_pre / <rule>_post stays visible around [REDACTED].
_FORMATS = {
    "pem": r"(?P<pem_pre>-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----)[\s\S]*?"
    r"(?P<pem_post>-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
    "openai_anthropic": r"(?<![\w-])sk-(?=[\w-]*\d)[\w-]{32,}",  # sk-, sk-proj-, sk-ant-api03-
    "google": r"(?<![\w-])AIza[\w-]{35}",
    "github": r"(?<!\w)(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_\w{22,})",
    "aws_key_id": r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])",
    "aws_secret": r"(?P<aws_secret_pre>(?i:aws_secret_access_key)[\"']?\s*[:=]\s*[\"']?)"
    r"[A-Za-z0-9/+]{40}",
    "slack": r"(?<![\w-])xox[baprs]-[A-Za-z0-9-]{10,}",
    "bearer": r"(?P<bearer_pre>\b[Bb]earer\s+)[\w~+/.=-]{16,}",
    "url_password": r"(?P<url_password_pre>\b[a-z][a-z0-9+.-]*://[^\s:/@]+:)[^\s@/]+(?=@)",
}


def is_secret_variable(name: str, value: str) -> bool:
    """A secret-looking name with a value worth hiding: not trivial, not a number, not a path."""
    upper = name.upper()
    if not any(part in upper for part in SECRET_NAME_PARTS):
        return False
    if len(value) < MIN_SECRET_LENGTH or value.lower() in _NOT_SECRETS or value.isdigit():
        return False
    try:
        return not os.path.exists(value)  # e.g. SSH_AUTH_SOCK, XAUTHORITY
    except (ValueError, OSError):
        return True


class Redactor:
    """Replaces secrets in text with [REDACTED], in one pass of one compiled regex."""

    def __init__(self, secrets: Iterable[str] = (), environ: Mapping[str, str] | None = None):
        environ = os.environ if environ is None else environ
        self._secrets = {v for name, v in environ.items() if is_secret_variable(name, v)}
        self._regex: re.Pattern[str] | None = None
        for secret in secrets:
            self.add_secret(secret)

    def add_secret(self, value: str) -> None:
        """Redact this exact value from now on (ignored if shorter than MIN_SECRET_LENGTH)."""
        if len(value) >= MIN_SECRET_LENGTH and value not in self._secrets:
            self._secrets.add(value)
            self._regex = None

    def redact(self, text: str) -> str:
        if not text:
            return text
        if self._regex is None:
            self._regex = self._compile()
        return self._regex.sub(self._replace, text)

    def redact_obj(self, obj: Any) -> Any:
        """Redact every string in a JSON-like structure (dicts, lists, tuples), keys included."""
        if isinstance(obj, str):
            return self.redact(obj)
        if isinstance(obj, dict):
            return {self.redact_obj(k): self.redact_obj(v) for k, v in obj.items()}
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
        groups = match.re.groupindex
        pre = match.group(f"{rule}_pre") if f"{rule}_pre" in groups else ""
        post = match.group(f"{rule}_post") if f"{rule}_post" in groups else ""
        return f"{pre}{REDACTED}{post}"


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
