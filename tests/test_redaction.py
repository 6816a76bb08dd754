"""Secrets never reach the LLM, the transcript or the log file."""

from __future__ import annotations

import logging

import pytest

from toy_agent.redaction import REDACTED, RedactingFilter, Redactor

# Fake keys in the real formats (built from parts so no scanner mistakes this file for a leak).
KEYS = {
    "anthropic": "sk-ant-" + "api03-" + "Abc123_-" * 12,
    "openai": "sk-" + "proj-" + "A1b2C3d4" * 8,
    "openai_legacy": "sk-" + "T3BlbkFJ" + "x9" * 20,
    "google": "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "github_pat": "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "github_fine": "github_pat_" + "11ABCDEFG0" * 5,
    "aws_id": "AKIA" + "IOSFODNN7EXAMPLE",
    "aws_session_id": "ASIA" + "Y34FZKBOKMUTVV7A",
    "slack": "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOp",
}


@pytest.mark.parametrize("kind", KEYS)
def test_known_key_formats_are_redacted(kind: str) -> None:
    text = f"config: {KEYS[kind]}, done"
    assert Redactor(environ={}).redact(text) == f"config: {REDACTED}, done"


def test_aws_secret_access_key_keeps_its_name() -> None:
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY"
    text = f"aws_secret_access_key = {secret}\nAWS_SECRET_ACCESS_KEY: '{secret}'"
    assert Redactor(environ={}).redact(text) == (
        f"aws_secret_access_key = {REDACTED}\nAWS_SECRET_ACCESS_KEY: '{REDACTED}'"
    )


def test_private_key_blocks_are_redacted_whole_and_truncated_ones_too() -> None:
    block = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nIBAAKC\n-----END RSA PRIVATE KEY-----"
    redactor = Redactor(environ={})
    assert redactor.redact(f"a\n{block}\nb") == (
        f"a\n-----BEGIN RSA PRIVATE KEY-----{REDACTED}-----END RSA PRIVATE KEY-----\nb"
    )
    cut = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA"
    assert "b3Bl" not in redactor.redact(cut)


def test_bearer_tokens_and_url_passwords_keep_their_context() -> None:
    redactor = Redactor(environ={})
    assert redactor.redact("Authorization: Bearer abcdef0123456789xyz") == (
        f"Authorization: Bearer {REDACTED}"
    )
    assert redactor.redact("postgres://app:hunter2hunter2@db:5432/x") == (
        f"postgres://app:{REDACTED}@db:5432/x"
    )


def test_secret_environment_values_are_redacted_and_names_stay_visible() -> None:
    env = {"OPENAI_API_KEY": "custom-proxy-key-123", "DB_PASSWORD": "correct horse battery"}
    text = "OPENAI_API_KEY=custom-proxy-key-123\npassword is correct horse battery"
    assert Redactor(environ=env).redact(text) == (
        f"OPENAI_API_KEY={REDACTED}\npassword is {REDACTED}"
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("API_KEY", "short"),  # too short: would redact ordinary words
        ("USE_AUTH", "disabled"),
        ("AUTH_TIMEOUT_MS", "30000000"),
        ("SSH_AUTH_SOCK", "/"),  # an existing path
        ("HOME", "/home/someone/secretive"),  # not a secret-looking name
    ],
)
def test_trivial_and_non_secret_environment_values_stay(name: str, value: str) -> None:
    text = f"value: {value}"
    assert Redactor(environ={name: value}).redact(text) == text


def test_environ_defaults_to_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-0123456789abcdef")
    assert Redactor().redact("x tok-0123456789abcdef y") == f"x {REDACTED} y"


def test_explicit_and_added_secrets_are_redacted_longest_first() -> None:
    redactor = Redactor(secrets=["abcdefgh"], environ={})
    redactor.add_secret("abcdefgh-and-more")
    redactor.add_secret("tiny")  # ignored: too short to be a key
    assert redactor.redact("abcdefgh-and-more abcdefgh tiny") == f"{REDACTED} {REDACTED} tiny"


def test_ordinary_code_is_left_alone() -> None:
    code = 'api_key = os.environ["OPENAI_API_KEY"]\ntoken = get_token()\nsk-learn is fine\n'
    assert Redactor(environ={}).redact(code) == code


def test_redact_obj_walks_json_structures() -> None:
    key = KEYS["github_pat"]
    data = {"messages": [{"content": f"key {key}"}, ("t", key)], "n": 3, key: None}
    assert Redactor(environ={}).redact_obj(data) == {
        "messages": [{"content": f"key {REDACTED}"}, ("t", REDACTED)],
        "n": 3,
        REDACTED: None,
    }


def test_many_secrets_in_large_text() -> None:
    secrets = [f"secret-value-{i:04d}-xyz" for i in range(300)]
    redactor = Redactor(secrets=secrets, environ={})
    text = "\n".join(f"line {i} has secret-value-{i % 300:04d}-xyz inside" for i in range(20_000))
    out = redactor.redact(text)
    assert "secret-value" not in out and out.count(REDACTED) == 20_000


def test_logging_filter_redacts_message_args_and_traceback() -> None:
    key = KEYS["anthropic"]
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    handler = Collect()
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.addFilter(RedactingFilter(Redactor(environ={})))
    logger = logging.getLogger("test_redaction.filter")
    logger.addHandler(handler)
    try:
        logger.warning("calling with %s", key)
        try:
            raise RuntimeError(f"auth failed for {key}")
        except RuntimeError:
            logger.exception("boom")
    finally:
        logger.removeHandler(handler)
    assert records[0] == f"calling with {REDACTED}"
    assert "RuntimeError: auth failed for [REDACTED]" in records[1]
    assert all(key not in r for r in records)
