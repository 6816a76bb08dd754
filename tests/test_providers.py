"""A provider is one row (toy_agent.providers): everything else derives from the table.

The proof is a provider toy_agent has never heard of, "acme", added as its row plus a client
class (an OpenAI-compatible subclass talking to a loopback server): the model name picks it,
its alias works, `.env` supplies its key, the redactor hides that key, child processes never
get it, a batch worker is given it, the missing-key message names it, it has prices and an
image rule, `--help` lists it, and its SDK logger is quietened. No other module is edited.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from fake_providers import FakeProvider, openai_reply
from fakes import xml_action

from toy_agent import providers
from toy_agent.cli import main
from toy_agent.llm import (
    LlmConfigError,
    OpenAICompatibleLlmClient,
    create_llm_client,
    model_image_types,
    resolve_settings,
)
from toy_agent.messages import Message, Usage
from toy_agent.pricing import Price, price_for
from toy_agent.providers import PROVIDERS, Provider, register_provider, unregister_provider
from toy_agent.redaction import REDACTED, Redactor
from toy_agent.variables import child_environment, is_agent_variable, load_dotenv_file

pytestmark = pytest.mark.usefixtures("clean_env")  # see conftest
ACME_KEY = "acme-secret-key-0123456789"
_VISION = frozenset({"image/png"})


class AcmeLlmClient(OpenAICompatibleLlmClient):
    """Acme speaks Chat Completions; its row says the rest."""

    provider = "acme"


ACME = Provider(
    name="acme",
    client=AcmeLlmClient,
    default_model="acme-1",
    key_variables=("ACME_API_KEY", "ACME_TOKEN"),
    base_url_variable="ACME_BASE_URL",
    default_base_url="https://api.acme.invalid/v1",
    api_version_variable="ACME_API_VERSION",
    models=r"acme-",
    aliases=("roadrunner",),
    prices={"acme-1": Price(1.00, 2.00)},
    image_types=lambda model: _VISION if "vision" in model else frozenset(),
    loggers=("acme_sdk",),
)


@pytest.fixture
def acme(monkeypatch):
    register_provider(ACME)
    for name in ACME.key_variables + providers.endpoint_variables():
        monkeypatch.delenv(name, raising=False)
    yield ACME
    unregister_provider("acme")
    logging.getLogger("acme_sdk").setLevel(logging.NOTSET)


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "notes.txt").write_text(f"the acme key is {ACME_KEY}\n")
    return root


def test_a_new_provider_row_runs_end_to_end_with_its_key_from_dotenv_redacted(acme, repo, capsys):
    with FakeProvider() as server:
        usage = Usage(1000, 100)
        server.enqueue(
            openai_reply(xml_action("read_file", path="notes.txt"), usage=usage),
            openai_reply(xml_action("task_complete", result="read it"), usage=usage),
        )
        Path(".env").write_text(f"ACME_API_KEY={ACME_KEY}\nACME_BASE_URL={server.url}/v1\n")
        code = main(["read notes.txt", "-r", str(repo), "-m", "acme-1", "--output", "json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and (result["provider"], result["result"]) == ("acme", "read it")
    first, second = server.requests
    assert first.path == "/v1/chat/completions" and first.body["model"] == "acme-1"
    assert first.header("authorization") == f"Bearer {ACME_KEY}"  # the key .env gave
    observation = json.dumps(second.body)
    assert ACME_KEY not in observation and f"the acme key is {REDACTED}" in observation
    assert result["cost_usd"] == pytest.approx(2 * (1000 * 1.00 + 100 * 2.00) / 1e6)
    assert logging.getLogger("acme_sdk").level == logging.WARNING


def test_a_new_provider_is_reached_by_its_alias_and_its_default_model(acme, repo, capsys):
    with FakeProvider() as server:
        server.enqueue(openai_reply(xml_action("task_complete", result="done")))
        env = {"ACME_TOKEN": ACME_KEY, "ACME_BASE_URL": server.url}  # the second key variable
        client = create_llm_client("acme", environ=env)
        assert type(client) is AcmeLlmClient and client.model == "acme-1"
        Path(".env").write_text("".join(f"{name}={value}\n" for name, value in env.items()))
        assert main(["x", "-r", str(repo), "--llm-provider", "roadrunner", "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["provider"] == "acme"
    assert server.requests[0].body["model"] == "acme-1"


def test_a_missing_key_of_a_new_provider_is_named_and_so_is_a_set_one(acme, repo, capsys):
    assert main(["x", "-r", str(repo), "--llm-provider", "acme"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "toy-agent: error: ACME_API_KEY (or ACME_TOKEN) is not set: export it or put it in .env"
    )
    with pytest.raises(LlmConfigError, match=r"or use --llm-provider acme \(its key is set\)"):
        resolve_settings("claude", None, None, {"ACME_TOKEN": ACME_KEY})


def test_a_batch_worker_is_given_a_new_providers_key_base_url_and_api_version(acme, monkeypatch):
    from toy_agent.batch.driver import RunSettings, provider_environment

    with FakeProvider() as server:
        server.enqueue(openai_reply("hello"))
        monkeypatch.setenv("ACME_API_KEY", ACME_KEY)
        monkeypatch.setenv("ACME_API_VERSION", "2025-11")
        environ = provider_environment(RunSettings(provider="acme", base_url=server.url))
        assert environ == {
            "ACME_API_KEY": ACME_KEY,
            "ACME_BASE_URL": server.url,
            "ACME_API_VERSION": "2025-11",
        }
        for name in environ:
            monkeypatch.delenv(name, raising=False)  # the worker has only what it is given
        client = create_llm_client("acme", model="acme-1", environ=environ)
        assert client.call_llm("", [Message("user", "hi")]).text == "hello"


def test_a_new_providers_variables_follow_the_dotenv_and_child_process_rules(acme, repo):
    assert all(map(is_agent_variable, ("ACME_API_KEY", "ACME_BASE_URL", "ACME_API_VERSION")))
    (repo / ".env").write_text(
        f"ACME_API_KEY={ACME_KEY}\nACME_BASE_URL=http://evil.invalid\nACME_API_VERSION=v9\n"
    )
    warnings: list[str] = []
    taken = load_dotenv_file(repo / ".env", repo, environ={}, warnings=warnings)
    assert taken == {"ACME_API_KEY": ACME_KEY}  # a repository's .env sets keys, never a URL
    assert "ignoring ACME_API_VERSION, ACME_BASE_URL" in warnings[0]
    child = child_environment(environ={"ACME_TOKEN": "x" * 20, "ACME_BASE_URL": "http://h"})
    assert child == {}


def test_a_new_providers_prices_images_and_help_come_from_its_row(acme, capsys):
    assert price_for("acme-1") == Price(1.00, 2.00)
    assert price_for("acme-1-20251101") == Price(1.00, 2.00)  # a dated snapshot
    assert model_image_types("acme", "acme-vision-2") == _VISION
    assert not model_image_types("acme", "acme-1")
    assert providers.provider_for_model("org/acme-2") is ACME
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "roadrunner" in help_text and "acme: acme-1" in help_text
    assert "ACME_API_KEY (or ACME_TOKEN)" in help_text and "ACME_BASE_URL" in help_text


def test_a_row_cannot_take_a_name_or_alias_already_in_use(acme):
    from dataclasses import replace

    for clash in (replace(ACME, name="gemini"), replace(ACME, name="x", aliases=("google",)),
                  replace(ACME, name="replay"), replace(ACME, name="anthropic")):  # fmt: skip
        with pytest.raises(ValueError, match="already taken"):
            register_provider(clash)
    with pytest.raises(ValueError, match="names no key variable"):
        register_provider(replace(ACME, name="keyless", aliases=(), key_variables=()))


@pytest.mark.parametrize("row", list(PROVIDERS.values()), ids=list(PROVIDERS))
def test_every_built_in_rows_key_is_taken_from_dotenv_redacted_and_named_when_missing(
    row, tmp_path
):
    key_name = row.key_variables[-1]  # the last: a hand-copied list tends to miss it
    dotenv = tmp_path / ".env"
    dotenv.write_text(f"{key_name}={ACME_KEY}\n{row.base_url_variable}=http://h\n")
    assert load_dotenv_file(dotenv, None, environ={}) == {
        key_name: ACME_KEY,
        row.base_url_variable: "http://h",
    }
    redactor = Redactor(environ={key_name: "1234567890"})  # a key that looks like nothing
    assert redactor.redact("key 1234567890") == f"key {REDACTED}"
    assert key_name not in child_environment(environ={key_name: ACME_KEY})
    with pytest.raises(LlmConfigError, match=rf"^{row.key_variables[0]}\b.* is not set"):
        resolve_settings(row.name, None, None, {})
    assert price_for(row.default_model) is not None
