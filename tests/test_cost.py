"""Prices, cost_usd everywhere a run is reported, and --max-cost."""

from __future__ import annotations

import json
import os

import pytest
from fake_providers import FakeProvider, anthropic_reply, openai_reply
from fakes import ScriptedLlm, xml_action

from toy_agent import ReactAgent
from toy_agent.cli import main
from toy_agent.messages import LlmResponse, Usage
from toy_agent.pricing import CostLimitReached, CostMeter, Price, meter_for, price_for
from toy_agent.providers import PROVIDERS


@pytest.fixture
def env(tmp_path, monkeypatch):
    """HOME and the XDG folders in tmp_path, no provider variables, a repository to work on."""
    for name, sub in (("HOME", "home"), ("XDG_STATE_HOME", "state"), ("XDG_CONFIG_HOME", "cfg")):
        (tmp_path / sub).mkdir()
        monkeypatch.setenv(name, str(tmp_path / sub))
    for name in list(os.environ):
        if name.endswith(("_API_KEY", "_BASE_URL")) or name.startswith("TOY_AGENT_"):
            monkeypatch.delenv(name)
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "hello.py").write_text("print('helo')\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_every_default_model_has_a_price():
    for provider, row in PROVIDERS.items():
        assert price_for(row.default_model) is not None, provider


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("claude-sonnet-4-5-20250929", Price(3.00, 15.00, 0.30, 3.75)),
        ("claude-opus-4-5", Price(5.00, 25.00, 0.50, 6.25)),
        ("claude-opus-4-1-20250805", Price(15.00, 75.00, 1.50, 18.75)),
        ("gpt-4o-2024-08-06", Price(2.50, 10.00, 1.25)),
        ("gpt-4o-2024-05-13", Price(5.00, 15.00)),
        ("gpt-5-mini-2025-08-07", Price(0.25, 2.00, 0.025)),
        ("models/gemini-2.5-flash", Price(0.30, 2.50, 0.03)),
        ("gemini-2.5-flash-lite", Price(0.10, 0.40, 0.01)),
    ],
)
def test_dated_snapshots_and_variants_get_their_own_price(model, expected):
    assert price_for(model) == expected


@pytest.mark.parametrize("model", ["claude-opus-4-6", "gpt-5-codex", "qwen2.5-coder", ""])
def test_unknown_models_have_no_price(model):
    assert price_for(model) is None


def test_cached_prompt_tokens_are_priced_at_the_cached_rate():
    # 1M prompt tokens of which 400k read from the cache, 100k out: 0.6M x $3 + 0.4M x $0.30
    # + 0.1M x $15
    cost = Price(3.00, 15.00, 0.30).cost(Usage(1_000_000, 100_000, 400_000))
    assert cost == pytest.approx(1.80 + 0.12 + 1.50)
    assert Price(1.0, 2.0).cost(Usage(1_000_000, 0, 1_000_000)) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("price_input", "price_output", "expected"),
    [(None, 15.0, Price(3.00, 15.00, 0.30, 3.75)), (None, 20.0, Price(3.00, 20.00, 0.30, 3.75)),
     (2.0, None, Price(2.00, 15.00, 0.30, 3.75)), (2.0, 20.0, Price(2.00, 20.00, 0.30, 3.75))],
)  # fmt: skip
def test_price_flags_change_only_the_prices_they_name_and_keep_the_cache_prices(
    price_input, price_output, expected
):
    price = meter_for("claude-sonnet-4-5", price_input=price_input, price_output=price_output).price
    assert price == expected
    # 1M prompt tokens written to Anthropic's cache cost the write price, never the input price
    assert price.cost(Usage(1_000_000, 0, cache_write_tokens=1_000_000)) == pytest.approx(3.75)
    # a model the table does not know has no cache prices: both flags, nothing else
    assert meter_for("qwen2.5-coder", price_input=0.5, price_output=1.0).price == Price(0.5, 1.0)


def test_the_meter_stops_before_the_call_that_would_exceed_the_limit():
    meter = CostMeter(Price(1.0, 0.0), limit=2.5)
    meter.check("", [])
    meter.add(Usage(1_000_000, 0))  # $1
    meter.check("", [])
    meter.add(Usage(1_000_000, 0))  # $2; the next is estimated at $1, to $3
    with pytest.raises(CostLimitReached, match=r"past the cost limit of \$2.5"):
        meter.check("", [])
    assert meter.spent == pytest.approx(2.0)


def test_a_prompt_that_alone_would_exceed_the_limit_is_never_sent(tmp_path):
    llm = ScriptedLlm(xml_action("task_complete", result="never"))
    meter = CostMeter(Price(3.0, 15.0), limit=0.000_001)
    result = ReactAgent(llm, tmp_path, cost=meter).run_result("x" * 10_000)

    assert result.outcome == "cost_limit" and result.iterations == 0
    assert llm.requests == [] and result.cost_usd == 0.0


def test_the_agent_reports_cost_for_known_models_and_none_otherwise(tmp_path):
    reply = LlmResponse(xml_action("task_complete", result="ok"), usage=Usage(2_000_000, 0))
    known = ScriptedLlm(reply)
    known.model = "gpt-5-mini"
    assert ReactAgent(known, tmp_path).run_result("x").cost_usd == pytest.approx(0.50)
    assert ReactAgent(ScriptedLlm(reply), tmp_path).run_result("x").cost_usd is None


@pytest.mark.slow
def test_max_cost_stops_a_run_whose_calls_report_large_usage(env, capsys, monkeypatch):
    big = Usage(200_000, 10_000)  # claude-sonnet-5-5: $0.40 + $0.10 = $0.50 a call
    trajectory = env / "run.json"
    with FakeProvider() as server:
        server.enqueue(
            anthropic_reply(xml_action("list_files"), usage=big),
            anthropic_reply(xml_action("read_file", path="hello.py"), usage=big),
            anthropic_reply(xml_action("task_complete", result="never"), usage=big),
        )
        for name, value in server.env("claude").items():
            monkeypatch.setenv(name, value)
        code = main(["--task", "look", "--repo", "repo", "--output", "json", "--max-cost", "1.2",
                     "--trajectory", str(trajectory)])  # fmt: skip

    result = json.loads(capsys.readouterr().out)
    assert code == 1
    assert result["outcome"] == "cost_limit" and "cost limit of $1.2" in result["error"]
    assert len(server.requests) == 2  # a third ($0.50 more, to $1.50) was never sent
    assert result["cost_usd"] == pytest.approx(1.00) and result["cost_usd"] <= 1.2
    assert result["iterations"] == 2
    recorded = json.loads(trajectory.read_text())["result"]
    assert recorded["outcome"] == "cost_limit" and recorded["cost_usd"] == pytest.approx(1.00)
    [session] = (env / "state" / "toy-agent" / "sessions").glob("*.json")
    saved = json.loads(session.read_text())
    assert saved["cost_usd"] == pytest.approx(1.00)
    assert saved["runs"][0]["outcome"] == "cost_limit"


@pytest.mark.slow
def test_an_unknown_model_reports_null_unless_prices_are_given(env, capsys, monkeypatch):
    with FakeProvider() as server:
        server.enqueue(
            openai_reply(xml_action("task_complete", result="ok"), usage=Usage(1_000_000, 0)),
            openai_reply(xml_action("task_complete", result="ok"), usage=Usage(1_000_000, 0)),
        )
        for name, value in server.env("openai").items():
            monkeypatch.setenv(name, value)
        args = ["--task", "x", "--repo", "repo", "--output", "json", "--llm-provider", "openai",
                "--model", "qwen2.5-coder"]  # fmt: skip
        assert main(args) == 0
        assert json.loads(capsys.readouterr().out)["cost_usd"] is None
        assert main([*args, "--price-input", "0.5", "--price-output", "1"]) == 0
        assert json.loads(capsys.readouterr().out)["cost_usd"] == pytest.approx(0.5)


def test_max_cost_without_a_price_is_a_usage_error(env, capsys, monkeypatch):
    with FakeProvider() as server:
        for name, value in server.env("openai").items():
            monkeypatch.setenv(name, value)
        code = main(["--task", "x", "--repo", "repo", "--llm-provider", "openai", "--model",
                     "my-local-model", "--max-cost", "1"])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "--max-cost needs a price" in err and "--price-input" in err
    assert server.requests == []


@pytest.mark.slow
def test_the_text_summary_shows_the_cost(env, capsys, monkeypatch):
    with FakeProvider() as server:
        server.enqueue(anthropic_reply(xml_action("task_complete", result="ok"),
                                       usage=Usage(1_000_000, 0)))  # fmt: skip
        for name, value in server.env("claude").items():
            monkeypatch.setenv(name, value)
        assert main(["--task", "x", "--repo", "repo"]) == 0
    assert "cost $2.0000" in capsys.readouterr().out  # claude-sonnet-5-5: $2 a million in
