"""Secrets never reach the LLM, the transcript or the log file."""

from __future__ import annotations

import base64
import json
import logging
import random
import tempfile
from pathlib import Path

import pytest
from fakes import ScriptedLlm, xml_action
from hypothesis import given, settings
from hypothesis import strategies as st

from toy_agent.agent import ReactAgent
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
    "stripe_live": "sk_" + "live_" + "51HxYzAbCdEfGhIjKlMnOpQrStUv",
    "stripe_test": "sk_" + "test_" + "51HxYzAbCdEfGhIjKlMnOpQrStUv",
    "stripe_restricted": "rk_" + "live_" + "51HxYzAbCdEfGhIjKlMnOpQr",
    "npm": "npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "gitlab": "glpat-" + "x1Y2z3A4b5C6d7E8f9G0",
    "huggingface": "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh",
    "google_oauth": "ya29." + "a0AfH6SMBx1y2z3_AbCdEfGhIjKl-mNoP",
    "pypi": "pypi-" + "AgEIcHlwaS5vcmcCJDAwMDAwMDAwLTAwMDAtMDAwMC0wMDAw",
    "sendgrid": "SG." + "AbCdEfGhIjKlMnOpQrStUv.WxYz0123456789AbCdEfGhIjKlMnOpQrStUvWxYz012",
}


def _jwt(payload: dict) -> str:
    def part(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part(payload)}.{'Sig' + 'n4tur3_x' * 5}"


JWT = _jwt({"sub": "1234567890", "name": "Ann", "iat": 1516239022})

# The body of a 2048-bit RSA key as `cat id_rsa` shows it: 64 base64 characters a line. Random
# bytes with a fixed seed, so the file holds no real key and the test is the same every run.
_BODY = base64.b64encode(random.Random(2048).randbytes(1190)).decode()
KEY_LINES = ["MIIEowIBAAKCAQEA" + _BODY[:48], *(_BODY[i : i + 64] for i in range(48, 1560, 64))]
RSA_KEY = "\n".join(
    ["-----BEGIN RSA PRIVATE KEY-----", *KEY_LINES, "-----END RSA PRIVATE KEY-----"]
)


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


def test_a_url_with_credentials_in_any_variable_is_redacted_whole() -> None:
    environ = {
        "DATABASE_URL": "postgres://app:hunter2@db.internal:5432/app",
        "SENTRY_DSN": "https://0123456789abcdef0123456789abcdef@o1.ingest.sentry.io/42",
        "GIT_REMOTE": "ssh://git@github.com/org/repo.git",  # a user name, no secret
    }
    text = " ".join(environ.values())
    assert Redactor(environ=environ).redact(text) == (
        f"{REDACTED} {REDACTED} ssh://git@github.com/org/repo.git"
    )


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


@pytest.mark.slow
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


# --- private keys seen in pieces ----------------------------------------------------------------


def test_private_key_lines_read_without_their_begin_line_are_redacted() -> None:
    read = "\n".join(f"{n:>4} | {line}" for n, line in enumerate(KEY_LINES[:9], start=2))
    out = Redactor(environ={}).redact(f"id_rsa, lines 2-10 of 28:\n{read}")
    assert out.splitlines()[1:] == [f"{n:>4} | {REDACTED}" for n in range(2, 11)]
    assert not any(line in out for line in KEY_LINES)


@pytest.mark.parametrize(
    "prefix",
    [
        "",  # cat, or a line of a program's output
        "id_rsa:5:",  # grep -rn
        "deploy/keys/id_rsa:5: ",
        "deploy/keys/id-rsa-6-",  # grep -C context line
        "  5: ",  # the search_in_files tool, under its file name
        "   5 | ",  # read_file
    ],
)
def test_one_private_key_line_is_redacted_whatever_tool_shows_it(prefix: str) -> None:
    text = f"3 matches for 'MII':\n{prefix}{KEY_LINES[4]}\n"
    assert Redactor(environ={}).redact(text) == f"3 matches for 'MII':\n{prefix}{REDACTED}\n"


def test_openssh_and_pgp_private_key_blocks_are_redacted_whole() -> None:
    openssh = (
        "-----BEGIN OPENSSH PRIVATE KEY-----\n"
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAABlwAAAAdzc2gtcn\n"
        f"{KEY_LINES[1]}\n-----END OPENSSH PRIVATE KEY-----"
    )
    pgp = (
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: GnuPG v2\n\n"
        f"lQOYBF{KEY_LINES[2]}\n{KEY_LINES[3]}\n=Zx9k\n-----END PGP PRIVATE KEY BLOCK-----"
    )
    out = Redactor(environ={}).redact(f"$ cat ~/.ssh/id_ed25519\n{openssh}\n$ cat key.asc\n{pgp}\n")
    assert out == (
        "$ cat ~/.ssh/id_ed25519\n"
        f"-----BEGIN OPENSSH PRIVATE KEY-----{REDACTED}-----END OPENSSH PRIVATE KEY-----\n"
        "$ cat key.asc\n"
        f"-----BEGIN PGP PRIVATE KEY BLOCK-----{REDACTED}-----END PGP PRIVATE KEY BLOCK-----\n"
    )


def test_a_private_key_in_a_json_string_is_redacted() -> None:
    service_account = json.dumps({"type": "service_account", "private_key": RSA_KEY + "\n"})
    assert Redactor(environ={}).redact(service_account) == (
        '{"type": "service_account", "private_key": '
        f'"-----BEGIN RSA PRIVATE KEY-----{REDACTED}-----END RSA PRIVATE KEY-----\\n"}}'
    )


def test_a_read_that_stops_before_the_end_line_loses_the_whole_key() -> None:
    numbered = "\n".join(f"{n:>4} | {line}" for n, line in enumerate(RSA_KEY.splitlines()[:8], 1))
    assert Redactor(environ={}).redact(numbered) == (
        f"   1 | -----BEGIN RSA PRIVATE KEY-----{REDACTED}"
    )


@pytest.mark.parametrize(
    "text",
    [
        "-----BEGIN CERTIFICATE-----\n" + "\n".join(KEY_LINES[1:4]) + "\n-----END CERTIFICATE-----",
        'PEM_HEADER = "-----BEGIN PRIVATE KEY-----"\ndef load(data: bytes) -> Key:\n    ...\n',
        "# '-----BEGIN RSA PRIVATE KEY-----...' is the PKCS#1 form\nrest = of_the_file()\n",
        "commit 3f786850e387550fdab836ed7e6dc881de23001b\n",
        "sha256: 47DEQPJ8HBSA9Y3XKQ12VPOKK7GI8NNZ3BQ4F6LS0LQ1FK5V9CH3R2ZQ8MXAT6\n",
        "    0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551,\n",
        "src/main/java/com/example/billing/InvoiceController2Test\n",
        "ThisIsAVeryLongClassNameWithoutAnyDigitsInItAtAll\n",
    ],
)
def test_certificates_and_long_ordinary_lines_stay(text: str) -> None:
    assert Redactor(environ={}).redact(text) == text


# --- tokens, cloud credentials and secret-named keys --------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"Set-Cookie: session={JWT}; Path=/; HttpOnly", f"Set-Cookie: session={REDACTED}; Path=/"),
        (f'{{"id_token": "{JWT}", "expires_in": 3599}}', f'{{"id_token": "{REDACTED}", "exp'),
        (f"DEBUG validated {JWT} for user 42", f"DEBUG validated {REDACTED} for user 42"),
        (f"https://app.example.com/callback#{JWT}", f"https://app.example.com/callback#{REDACTED}"),
    ],
)
def test_jwts_are_redacted_anywhere(text: str, expected: str) -> None:
    assert Redactor(environ={}).redact(text).startswith(expected)


def test_aws_credentials_are_redacted_in_json_ini_env_and_csv() -> None:
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY"
    session = "IQoJb3JpZ2luX2VjEJr//////////" + "wEaCXVzLWVhc3QtMSJHMEUCIQD6Zm0="
    assume_role = (  # aws sts assume-role
        f'{{"Credentials": {{"AccessKeyId": "{KEYS["aws_session_id"]}", '
        f'"SecretAccessKey": "{secret}", "SessionToken": "{session}", '
        '"Expiration": "2025-01-01T00:00:00Z"}}'
    )
    credentials_file = (
        f"[default]\naws_access_key_id = {KEYS['aws_id']}\naws_secret_access_key = {secret}\n"
        f"aws_session_token = {session}\nregion = eu-west-1\n"
    )
    env = f"export AWS_SECRET_ACCESS_KEY={secret}\nexport AWS_SESSION_TOKEN={session}\n"
    access_keys_csv = f"Access key ID,Secret access key\n{KEYS['aws_id']},{secret}\n"
    redactor = Redactor(environ={})
    assert redactor.redact(assume_role) == (
        f'{{"Credentials": {{"AccessKeyId": "{REDACTED}", "SecretAccessKey": "{REDACTED}", '
        f'"SessionToken": "{REDACTED}", "Expiration": "2025-01-01T00:00:00Z"}}}}'
    )
    assert redactor.redact(credentials_file) == (
        f"[default]\naws_access_key_id = {REDACTED}\naws_secret_access_key = {REDACTED}\n"
        f"aws_session_token = {REDACTED}\nregion = eu-west-1\n"
    )
    assert redactor.redact(env) == (
        f"export AWS_SECRET_ACCESS_KEY={REDACTED}\nexport AWS_SESSION_TOKEN={REDACTED}\n"
    )
    assert redactor.redact(access_keys_csv) == f"Access key ID,Secret access key\n{REDACTED}\n"


@pytest.mark.parametrize(
    ("file", "text", "expected"),
    [
        (".env", "DB_PASSWORD=hunter2hunter2\nDB_USER=app\n", "DB_PASSWORD=[R]\nDB_USER=app\n"),
        (".env", "SMTP_PASS=letmein # rotate me\n", "SMTP_PASS=[R] # rotate me\n"),
        ("deploy.sh", 'export API_TOKEN="tok_9f8e7d6c5b4a"\n', 'export API_TOKEN="[R]"\n'),
        ("deploy.sh", "PGPASSWORD=s3cr3t! psql -h db\n", "PGPASSWORD=[R] psql -h db\n"),
        ("config.yaml", "db:\n  password: s3cr3tpass\n", "db:\n  password: [R]\n"),
        ("config.yaml", "  password: hunter2\n  user: bob\n", "  password: [R]\n  user: bob\n"),
        ("config.yaml", "password: correcthorse\n", "password: [R]\n"),
        ("compose.yml", "      - POSTGRES_PASSWORD=Pa55word\n", "      - POSTGRES_PASSWORD=[R]\n"),
        (
            "client.json",
            '{"client_id": "42.apps.example.com", "client_secret": "GOCSPX-9aB8cD7eF6gH"}',
            '{"client_id": "42.apps.example.com", "client_secret": "[R]"}',
        ),
        ("settings.py", "SECRET_KEY = 'django-insecure-k7#x9!v2m'\n", "SECRET_KEY = '[R]'\n"),
        ("my.cnf", "[client]\npassword = hunter2\n", "[client]\npassword = [R]\n"),
        ("app.ini", "secret_key = 9fJ2kL8mN3pQ\n", "secret_key = [R]\n"),
        ("app.toml", 'api_key = "AbCdEf123456"\n', 'api_key = "[R]"\n'),
        (
            "app.properties",
            "spring.datasource.password=Tr0ub4dor&3\n",
            "spring.datasource.password=[R]\n",
        ),
        ("log", "GET /v1/items?access_token=9f8e7d6c5b4a3f2e", "GET /v1/items?access_token=[R]"),
        ("curl", 'curl -H "X-Api-Key: 9f8e7d6c5b4a3f2e" x', 'curl -H "X-Api-Key: [R]" x'),
        ("main.py", 'client = Client(api_key="AbCdEf123456")', 'client = Client(api_key="[R]")'),
    ],
)
def test_literal_values_of_secret_named_keys_are_redacted_and_names_stay(
    file: str, text: str, expected: str
) -> None:
    assert Redactor(environ={}).redact(text) == expected.replace("[R]", REDACTED)


@pytest.mark.parametrize(
    "text",
    [
        'password = request.form["password"]',
        "token = self.token",
        "password = user_password",
        "password = hashed",  # a bare word after ` = ` is a variable: INI `password = letmein` too
        "connect(host=host, password=password)\nf(token=token, secret=secret_value)",
        "def login(password: str, token: str | None = None) -> Token:",
        "    api_key: SecretStr = Field(default=None)",
        "    password: Optional[str] = None",
        "const apiKey = process.env.API_KEY;\n  token: accessToken\n}",
        'let token = env::var("TOKEN")?;\n$password = $_POST["password"];',
        'Password: os.Getenv("DB_PASSWORD"),',
        "API_TOKEN=${API_TOKEN}\nDB_PASSWORD=$DB_PASSWORD\nTOKEN=$(cat /run/secrets/token)",
        'token: "{{ .Values.token }}"\nGITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}',
        "password: <your-password>\napi_key: your-api-key-here\nPASSWORD=changeme",
        "secret: xxxxxxxx\nSECRET_KEY=***",
        'password: null\ntoken: ""\napi_key: ~\nsecret:\n  name: db',
        "tokenizer: bert-base-uncased\nmax_tokens: 4096\nMAX_TOKENS = 4096",
        "password_min_length: 12\ntoken_expiry_seconds: 3600",
        'PASSWORD_FILE=/run/secrets/db\nTOKEN_URL = "https://oauth2.googleapis.com/token"',
        '#password_encryption = scram-sha-256\n"refresh_token": "refreshToken",',
        'API_KEY_ENV = "OPENAI_API_KEY"\ngenai.Client(api_key="my-api-key")',
        'Token.Comment: "italic #A3AAB2",',  # pygments: Token is the object, Comment the key
        'raise ValueError("password: must be 8 characters")',
        "if token == 'abc123def456':",
    ],
)
def test_code_references_and_placeholders_after_secret_names_stay(text: str) -> None:
    assert Redactor(environ={}).redact(text) == text


def test_a_secret_from_the_environment_is_found_inside_a_value_read_as_code() -> None:
    redactor = Redactor(environ={"DB_PASSWORD": "correct horse battery"})
    assert redactor.redact("password: correct horse battery") == f"password: {REDACTED}"


def test_slack_webhook_keeps_its_host_and_loses_its_path() -> None:
    text = "hook: https://hooks.slack.com/services/T0123ABCD/B0456EFGH/aBcDeFgHiJkLmNoPqRsTuVwX\n"
    assert Redactor(environ={}).redact(text) == (
        f"hook: https://hooks.slack.com/services/{REDACTED}\n"
    )


# --- cut text, idempotence, cost -----------------------------------------------------------------


@pytest.mark.parametrize("kind", KEYS)
def test_a_key_glued_to_the_word_before_it_is_redacted(kind: str) -> None:
    text = f"hash=ffff00{KEYS[kind]}, done"
    assert Redactor(environ={}).redact(text) == f"hash=ffff00{REDACTED}, done"


@pytest.mark.parametrize(
    "text",
    [
        "task-runner-abcdefghijklmnopqrstuvwxyz0123",  # sk- glued, a slug
        "task-550e8400-e29b-41d4-a716-446655440000",
        "task-d41d8cd98f00b204e9800998ecf8427e",  # a hex digest after sk-
        "disk-admin-panel-configuration-v2-final-x",
        "test_network_test_HandlesTimeoutsGracefully",  # rk_test_ in a test's name
        "ERROR_MSG.connectionRefusedByTheServer.someOtherLongIdentifierNameHere",  # SG.
        "myxapp-server-config-thing",
        "coughs_AtTheFunnyJokeThatWasToldYesterday",  # ghs_, no digit
    ],
)
def test_a_short_prefix_inside_a_word_leaves_the_word_alone(text: str) -> None:
    assert Redactor(environ={}).redact(text) == text


# Text before a key: letters, digits and _ of any script, as a hex dump or a log glues them.
WORD_CHARACTERS = st.text(st.characters(categories=("L", "Nd"), include_characters="_"))


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    before=WORD_CHARACTERS,
    kind=st.sampled_from(sorted(KEYS)),
    after=st.sampled_from(["", "\n", " ", '", ', "…"]),
)
def test_a_key_after_any_word_characters_never_reaches_the_model(
    before: str, kind: str, after: str
) -> None:
    """Through a real run: the model reads a file where the key is glued to the text before
    it, and no request it is sent holds the key's end."""
    key = KEYS[kind]
    with tempfile.TemporaryDirectory() as repo:
        Path(repo, "dump.txt").write_text(f"{before}{key}{after}\n", encoding="utf-8")
        llm = ScriptedLlm(
            xml_action("read_file", path="dump.txt"), xml_action("task_complete", result="ok")
        )
        ReactAgent(llm, repo, redactor=Redactor(environ={})).run("read dump.txt")
    sent = llm.sent_text()
    assert key[-16:] not in sent
    assert REDACTED in sent


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("key sk-ant-api03-abcdefghij…", "key [R]…"),  # tools.py: text[:limit] + "…"
        ("  3: ANTHROPIC_KEY=sk-ant-api03-abcdefghij …", "  3: ANTHROPIC_KEY=[R] …"),  # search
        ("token ghp_a1B2c3D4e5F6 [… 5,001 characters cut: see]", "token [R] [… 5,001"),  # a line
        ("x sk-ant-api03-abcdefghij\n[… 4,096 bytes (12 lines) cut: pipe]\n", "x [R]\n"),  # output
        ('  "SessionToken": "IQoJb3JpZ2luX2VjEJr//wEaCXVz…', '  "SessionToken": "[R]…'),
        ("npm_a1B2c3D4e5F6g7H8", "[R]"),  # the end of the text
        ("key sk-ant-api03-abcdefghij and more", "key sk-ant-api03-abcdefghij and more"),
    ],
)
def test_a_key_cut_short_by_a_tool_has_its_visible_head_redacted(text: str, expected: str) -> None:
    assert Redactor(environ={}).redact(text).startswith(expected.replace("[R]", REDACTED))


ATTACKS = [
    *KEYS.values(),
    JWT,
    RSA_KEY,
    RSA_KEY[:300],
    KEY_LINES[5],
    "DB_PASSWORD=hunter2hunter2",
    "password: hunter2",
    '"SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"',
    'token: "abc123def456…',
    "postgres://app:hunter2hunter2@db:5432/x",
    "Authorization: Bearer abcdef0123456789xyz",
]
SNIPPETS = [*ATTACKS, " ", "\n", "…", ":", "=", '"', "  7 | ", "token = get_token()", "[REDACTED]"]


@pytest.mark.slow
@given(st.lists(st.sampled_from(SNIPPETS), max_size=8).map("".join))
def test_redacting_redacted_text_changes_nothing(text: str) -> None:
    redactor = Redactor(environ={})
    once = redactor.redact(text)
    assert redactor.redact(once) == once


@pytest.mark.slow
def test_a_megabyte_of_ordinary_source_comes_back_unchanged() -> None:
    """No rule may take quadratic time: `a.a.a.…` once took 10 seconds per 100 KB."""
    source = (
        "class Settings(BaseModel):\n"
        "    api_key: SecretStr | None = None\n"
        "    max_tokens: int = 4096\n\n"
        "    def headers(self, token: str) -> dict[str, str]:\n"
        '        password = os.environ.get("DB_PASSWORD", "")\n'
        '        return {"Authorization": f"Bearer {token}", "X-Count": str(len(password))}\n'
        "# see https://docs.example.com/v2/auth and sha256 3f786850e387550fdab836ed7e6dc881de2300\n"
    )
    worst = ["a." * 50_000, "a-" * 50_000, "Ab+/" * 25_000, " " * 100_000, "token" * 20_000]
    text = source * (1_000_000 // len(source)) + "\n".join(worst)
    assert Redactor(environ={}).redact(text) == text
