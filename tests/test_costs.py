"""Dollars and budget caps: the price table and its overrides, costs shown on runs, votes and evals, and `--max-cost`,
which stops a run, a verification or an eval before the model call that would cross it (against the fake Messages
API on a real socket, through the real anthropic SDK)."""

from __future__ import annotations

import pytest
import yaml
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from fake_anthropic import FakeAnthropicServer, forget_machine_setup, text_message, tool_message, usage
from notebook_setup import notebook_folder, registered_magics
from skillfiles import make_skill
from skills_magic.models import prices
from skills_magic.models.prices import PriceError, cost_of, price_of
from skills_magic.runs import budget
from skills_magic.runs.result import RunResult

FAKE_KEY = "sk-ant-costs-FAKE-KEY-0000"
MODEL = "claude-fake-1"  # the fake server's model: it has no price until a test gives it one
MILLION = 1_000_000
VOTE_USAGE = usage(600, 800)  # what each vote reports: $0.0018 + $0.012 at $3 / $15
CLAIMS = "\n".join(f"- claim: Claim number {n} holds\n  quote: \"number {n}\"" for n in range(1, 4))


@pytest.fixture(autouse=True)
def no_overrides():
    """Overrides are the process's: every test starts and ends with none."""
    prices.OVERRIDES.clear(), prices.OVERRIDE_ORIGINS.clear(), prices._loaded.clear()
    yield
    prices.OVERRIDES.clear(), prices.OVERRIDE_ORIGINS.clear(), prices._loaded.clear()


# --- the table ------------------------------------------------------------------------------------------------------


def test_each_token_kind_costs_its_own_price_and_a_batch_half():
    price = prices.PRICES["opus-5-5"]
    assert (price.input, price.output, price.cache_write_5m, price.cache_write_1h, price.cache_read) == (4, 20, 5, 8, 0.2)
    assert cost_of("claude-opus-5-5", {"input_tokens": MILLION}) == pytest.approx(4.0)
    assert cost_of("claude-opus-5-5", {"output_tokens": MILLION}) == pytest.approx(20.0)
    assert cost_of("claude-opus-5-5", {"cache_creation_input_tokens": MILLION}) == pytest.approx(5.0)  # 5-minute writes
    assert cost_of("claude-opus-5-5", {"cache_read_input_tokens": MILLION}) == pytest.approx(0.2)
    one_hour = {"cache_creation_input_tokens": MILLION, "cache_creation": {"ephemeral_1h_input_tokens": MILLION // 4}}
    assert cost_of("claude-opus-5-5", one_hour) == pytest.approx(0.75 * 5 + 0.25 * 8)  # as the API splits them
    mixed = {"input_tokens": 1200, "output_tokens": 40, "cache_creation_input_tokens": 1000, "cache_read_input_tokens": 500}
    expected = (1200 * 4 + 40 * 20 + 1000 * 5 + 500 * 0.2) / MILLION
    assert cost_of("claude-opus-5-5", mixed) == pytest.approx(expected)
    assert cost_of("claude-opus-5-5", mixed, batch=True) == pytest.approx(expected * prices.BATCH_DISCOUNT)
    assert prices.BATCH_DISCOUNT == 0.5


def test_a_model_id_takes_the_longest_table_key_it_holds():
    assert price_of("claude-opus-4-1-20250805").input == 15  # not opus-4-... nor opus
    assert price_of("claude-opus-4-5").input == 5
    assert price_of("claude-3-5-haiku-20241022").input == 0.8
    assert price_of("claude-sonnet-5-5").output == 10
    assert price_of("claude-sonnet-4-20250514").input == 3
    assert price_of("claude-opus-9").input == 5  # an unknown version: its family's price
    assert price_of(MODEL) is None and cost_of(MODEL, {"input_tokens": 10}) is None and price_of(None) is None
    assert prices.PRICES_CHECKED == "2026-12-01"


def test_overrides_from_the_config_file_win_and_bad_ones_name_the_file(_config_dir):
    (_config_dir / "prices.yaml").write_text(yaml.safe_dump({MODEL: {"input": 2, "output": 8}, "sonnet-5-5": {"output": 12}}))
    assert price_of(MODEL) == prices.Price(2, 8, 2.5, 4, 0.2)  # cache prices follow input by the published rule
    assert price_of("claude-sonnet-5-5").output == 12 and price_of("claude-sonnet-5-5").input == 2
    assert cost_of(MODEL, {"input_tokens": MILLION, "output_tokens": MILLION}) == pytest.approx(10.0)

    (_config_dir / "prices.yaml").write_text(yaml.safe_dump({MODEL: {"input": 2, "outptu": 8}}))
    with pytest.raises(PriceError, match=r"prices\.yaml: claude-fake-1: unknown price field 'outptu'"):
        prices.load_user_prices(again=True)
    (_config_dir / "prices.yaml").write_text(yaml.safe_dump({MODEL: {"input": -2, "output": 8}}))
    with pytest.raises(PriceError, match="input must be 0 or more"):
        prices.load_user_prices(again=True)


# --- %skills price and the magics -------------------------------------------------------------------------------------


@pytest.fixture
def magics(ip, tmp_path, monkeypatch):
    forget_machine_setup(monkeypatch, tmp_path)
    notebook_folder(monkeypatch, tmp_path, db="skills.sqlite", lock=None, sources="path", path=tmp_path / "skills")
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    monkeypatch.delenv(budget.MAX_COST_ENV, raising=False)
    make_skill(tmp_path / "skills" / "tea-notes", description="Writes tasting notes for a tea. Use when asked about tea.")
    with registered_magics(ip) as instance:
        yield instance


def test_skills_price_overrides_a_model_and_shows_the_table_with_its_date(ip, magics):
    view = ip.run_line_magic("skills", f"price {MODEL} input=3 output=15 cache_read=0.5")
    assert price_of(MODEL) == prices.Price(3, 15, 3.75, 6, 0.5)
    assert view.text().startswith(f"{MODEL}: input $3, output $15 per million tokens, for this session")
    shown = ip.run_line_magic("skills", "price")
    assert "the table was checked on 2026-12-01" in shown.text() and "1 override" in shown.text()
    rows = shown.data()["prices"]
    assert rows[0] == {"model": MODEL, "input": 3, "output": 15, "cache_write_5m": 3.75, "cache_write_1h": 6,
                       "cache_read": 0.5, "batch": 0.5, "from": "%skills price"}
    assert {"model": "opus-5-5", "input": 4, "output": 20, "cache_write_5m": 5, "cache_write_1h": 8, "cache_read": 0.2,
            "batch": 0.5, "from": "table"} in rows
    assert "input $2, output $10" in ip.run_line_magic("skills", "price claude-sonnet-5-5").text()


@pytest.mark.parametrize("line, said", [
    (f"price {MODEL} input=3 outptu=15", "unknown price field 'outptu'; the fields are input, output"),
    (f"price {MODEL} input=3", "has no price yet: give at least input= and output="),
    (f"price {MODEL} input=-3 output=15", "input must be 0 or more dollars per million tokens"),
    (f"price {MODEL} input", "'input' is not FIELD=DOLLARS"),
])
def test_a_bad_price_is_one_clear_line(ip, magics, line, said):
    with pytest.raises(UsageError, match=said):
        ip.run_line_magic("skills", line)
    assert MODEL not in prices.OVERRIDES


@pytest.mark.parametrize("value, said", [("-1", "must be 0 or more US dollars"), ("lots", "is a number of US dollars")])
def test_a_bad_cap_is_one_clear_line(ip, magics, value, said):
    with pytest.raises(UsageError, match=said):
        ip.run_cell_magic("skill", f"run --max-cost {value}", "Hello.")
    with pytest.raises(UsageError, match=said):
        ip.run_cell_magic("skill", f"verify --max-cost={value}", CLAIMS)


def test_a_bad_session_default_cap_is_refused_before_any_call(ip, magics, monkeypatch):
    monkeypatch.setenv(budget.MAX_COST_ENV, "-0.5")
    with FakeAnthropicServer([text_message("hi")]) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        ip.run_line_magic("skills", f"model anthropic {MODEL}")
        with pytest.raises(UsageError, match="SKILLS_MAGIC_MAX_COST must be 0 or more US dollars"):
            ip.run_cell_magic("skill", "run", "Hello.")
        assert server.requests == []


# --- caps -----------------------------------------------------------------------------------------------------------


def test_a_run_stops_before_the_call_that_would_cross_its_cap_and_keeps_what_it_has(ip, magics, monkeypatch):
    replies = [tool_message("activate_skill", {"name": "tea-notes"}, usage=usage(3000, 500)),
               text_message("Orchid nose.", usage=usage(3500, 100))]
    ip.run_line_magic("skills", f"price {MODEL} input=3 output=15")
    with FakeAnthropicServer(replies) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        ip.run_line_magic("skills", f"model anthropic {MODEL}")
        # a call may cost its input and 4,096 output tokens ($0.061): the first fits under $0.07, the second not
        view = ip.run_cell_magic("skill", "run --max-cost 0.07", "Write notes for this oolong.")
        assert len(server.requests) == 1
    result: RunResult = view.result if hasattr(view, "result") else view
    spent = (3000 * 3 + 500 * 15) / MILLION
    assert result.stop_reason == "max_cost" and result.turns == 1
    assert result.note == f"stopped before a call that would cross the cap of $0.0700: spent ${spent:.4f}"
    assert result.priced_usd == pytest.approx(spent)
    assert [c.name for c in result.tool_calls] == ["activate_skill"]  # what it did is kept
    text = view.text() if hasattr(view, "text") else ""
    assert f"cost ${spent:.6f} (at the price table)" in text and "stopped before a call that would cross" in text

    # the same run with room for both calls goes to the end, and costs what both reported
    with FakeAnthropicServer(replies) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        ip.run_line_magic("skills", f"model anthropic {MODEL}")
        whole = ip.run_cell_magic("skill", "run --max-cost 1", "Write notes for this oolong.")
        assert len(server.requests) == 2
    whole = whole.result if hasattr(whole, "result") else whole
    assert whole.stop_reason == "end_turn" and whole.priced_usd == pytest.approx(spent + (3500 * 3 + 100 * 15) / MILLION)


def verdict():
    return tool_message("record_verdict", {"refuted": False, "evidence": "The quote says so.", "confidence": "high"},
                        usage=VOTE_USAGE)


def test_a_verify_below_its_estimate_stops_before_the_crossing_vote_and_shows_partial_results(ip, magics, monkeypatch):
    ip.run_line_magic("skills", f"price {MODEL} input=3 output=15")
    per_vote = (600 * 3 + 800 * 15) / MILLION
    with FakeAnthropicServer([verdict() for _ in range(9)]) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        ip.run_line_magic("skills", f"model anthropic {MODEL}")
        with capture_output() as shown:
            view = ip.run_cell_magic("skill", "verify --concurrency 1 --max-cost 0.05", CLAIMS)
        sent = len(server.requests)
    estimate = [o.data for o in shown.outputs if "application/vnd.skills-magic.estimate+json" in o.data]
    assert len(estimate) == 1  # shown before the votes
    estimated = estimate[0]["application/vnd.skills-magic.estimate+json"]
    assert estimated["requests"] == 9 and estimated["cap_usd"] == 0.05 and estimated["cost_usd"] > 0.05
    assert estimate[0]["text/plain"].startswith("estimate before the verification: 9 requests x about ")

    most = estimated["cost_usd"] / 9  # a vote's estimate: its input, and VOTE_MAX_TOKENS of output
    assert 0 < sent < 9
    assert (sent - 1) * per_vote + most <= 0.05 < sent * per_vote + most  # exactly the votes that fit were sent
    data = view.data()
    statuses = [vote["status"] for claim in data["claims"] for vote in claim["votes"]]
    assert statuses == ["upheld"] * sent + ["abstained"] * (9 - sent)
    refused = [vote.get("reason") for claim in data["claims"] for vote in claim["votes"]][sent:]
    note = f"stopped before a call that would cross the cap of $0.0500: spent ${sent * per_vote:.4f}"
    assert refused == [f"not sent: {note}"] * (9 - sent)
    assert data["stopped"] == note and data["cost_usd"] == pytest.approx(sent * per_vote)
    assert f"{note} (the votes sent are kept)" in view.text() and f"cost ${sent * per_vote:.4f}" in view.text()


def prompt_set(folder, prompts: int) -> str:
    items = [{"id": f"d{n}", "prompt": f"Write tasting notes for tea number {n}.", "expected": ["tea-notes"]}
             for n in range(prompts)]
    (folder / "prompts.yaml").write_text(yaml.safe_dump({"prompts": items}), encoding="utf-8")
    return "prompts.yaml"


def test_an_eval_under_a_cap_stops_where_the_cap_would_be_crossed(ip, magics, monkeypatch, tmp_path):
    ip.run_line_magic("skills", f"price {MODEL} input=3 output=15")
    replies = [text_message("No skill needed.", usage=usage(700, 20)) for _ in range(12)]
    with FakeAnthropicServer(replies) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        ip.run_line_magic("skills", f"model anthropic {MODEL}")
        with capture_output() as shown:
            view = ip.run_line_magic("skills", f"eval {prompt_set(tmp_path, 4)} --runs 3 --max-cost 0.07")
        sent = len(server.requests)
    assert any("estimate before the eval: 24 requests" in o.data.get("text/plain", "") for o in shown.outputs)
    assert 0 < sent < 12  # each run ends after one call here; the cap stopped the eval part-way
    report = view.reports[0]
    assert len(report.records) == sent and report.stopped.startswith("stopped before a call that would cross the cap")
    assert report.cost_usd == pytest.approx(sent * (700 * 3 + 20 * 15) / MILLION)
    assert report.stopped in view.text()


def test_an_unattended_large_eval_with_no_cap_stops_with_a_message(ip, magics, monkeypatch, tmp_path):
    with FakeAnthropicServer([]) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        ip.run_line_magic("skills", "model anthropic claude-sonnet-5-5")
        magics.session.asker = __import__("skills_magic.safety.requests", fromlist=["unattended"]).unattended
        with pytest.raises(UsageError, match=r"the eval would cost up to \$\d+\.\d\d, more than \$5\.00, with no cap set, "
                                             r"and nobody approved it: set a cap with --max-cost USD"):
            ip.run_line_magic("skills", f"eval {prompt_set(tmp_path, 30)} --runs 3")
        assert server.requests == []
        # with a cap it is the cap that decides: nothing asks
        magics.session.asker = lambda request: pytest.fail(f"asked: {request.describe()}")
        server.add(text_message("No skill needed.", usage=usage(700, 400)))
        # a call may cost 4,096 output tokens at $10 ($0.041) and its input: one fits under $0.045, two do not
        view = ip.run_line_magic("skills", f"eval {prompt_set(tmp_path, 30)} --runs 3 --max-cost 0.045")
        assert view.reports[0].stopped and len(server.requests) == 1


def test_the_budget_holds_calls_in_flight_and_refuses_every_call_after_the_first_refusal():
    cap = budget.Budget(1.0)
    request = {"max_tokens": 20_000, "messages": [{"role": "user", "content": "x" * 4000}]}
    one = cap.call_cost("claude-sonnet-5-5", request)
    assert one == pytest.approx((budget.estimated_input_tokens(request) * 2 + 20_000 * 10) / MILLION)
    held = [cap.reserve("claude-sonnet-5-5", request) for _ in range(int(1.0 // one))]
    with pytest.raises(budget.CapReached, match=r"cap of \$1\.00: spent \$0\.0000"):
        cap.reserve("claude-sonnet-5-5", request)
    for amount in held:
        cap.settle(amount, "claude-sonnet-5-5", {"input_tokens": 10})
    with pytest.raises(budget.CapReached):  # once stopped, stopped: a cheaper call later does not slip through
        cap.reserve("claude-sonnet-5-5", {"max_tokens": 1, "messages": []})
    with pytest.raises(budget.BudgetError, match="there is no price for 'claude-fake-1'"):
        budget.Budget(1.0).reserve(MODEL, request)
    assert budget.Budget(None).reserve(MODEL, request) == 0.0  # no cap: nothing to keep


def test_in_a_real_kernel_an_unattended_large_eval_stops_and_a_capped_one_shows_where_it_stopped(tmp_path, monkeypatch):
    """nbclient's kernel takes no input: the eval's question cannot be answered, so it stops before any request."""
    import nbformat
    from nbclient import NotebookClient

    forget_machine_setup(monkeypatch, tmp_path)
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    monkeypatch.delenv(budget.MAX_COST_ENV, raising=False)
    monkeypatch.setenv("SKILLS_MAGIC_SOURCES", "path")
    monkeypatch.setenv("SKILLS_MAGIC_PATH", str(tmp_path / "skills"))
    make_skill(tmp_path / "skills" / "tea-notes", description="Writes tasting notes for a tea. Use when asked about tea.")
    prompts = prompt_set(tmp_path, 30)
    cells = ["%load_ext skills_magic\n%skills model anthropic claude-sonnet-5-5", f"%skills eval {prompts} --runs 3",
             f"%skills eval {prompts} --runs 3 --max-cost 0.045"]
    with FakeAnthropicServer([text_message("No skill needed.", usage=usage(700, 400))]) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                       resources={"metadata": {"path": str(tmp_path)}}).execute()
        assert len(server.requests) == 1  # the uncapped eval sent nothing; the capped one its first call only
    said = "".join(o.get("text", "") for o in nb.cells[1].outputs if o["output_type"] == "stream")  # a UsageError's line
    assert "more than $5.00, with no cap set, and nobody approved it: set a cap with --max-cost USD" in said
    texts = [o.get("data", {}).get("text/plain", "") for o in nb.cells[2].outputs]
    assert any(t.startswith("estimate before the eval: 180 requests") and "cap $0.0450" in t for t in texts)
    assert any("stopped before a call that would cross the cap of $0.0450: spent $0.0054" in t for t in texts)
