"""Verification votes that fail, through the REAL `anthropic` SDK: only the socket is fake.

Votes run concurrently, so a queue of replies cannot say which vote gets which: `Router` answers each request by the
vote it is (the claim under review and "voter K of N" in the prompt), through an httpx2 async MockTransport, or
through the local fake server (`fake_anthropic.FakeAnthropicServer`) on a real socket. Error replies carry
`retry-after-ms: 1`, so the SDK's own retries never wait. A vote that must never answer awaits an asyncio.Event that
nobody sets; nothing here sleeps.
"""

from __future__ import annotations

import _thread
import asyncio
import collections
import json
import re
import signal
import threading

import httpx2
import pytest
from fake_anthropic import Error, FakeAnthropicServer, forget_machine_setup, text_message, tool_message, usage
from notebook_setup import notebook_folder

from skills_magic.skills.catalog import Source
from skills_magic.notebook.views import VotesView
from skills_magic.models.anthropic import AnthropicModel
from skills_magic.session import SkillsSession
from skills_magic.runs.verify import (
    VERDICT_TOOL,
    Claim,
    ModelVoter,
    decide,
    verify,
    voter_prompt,
)
from skills_magic.notebook.widgets import VoteBoard

KEY = "sk-ant-fake-verify-0123456789"
MODEL_ID = "claude-test-verify"
HANG = "hang"  # a reply: the request never gets an answer
SEAT = re.compile(r"\(voter (\d+) of (\d+)\)")
CLAIM = re.compile(r'## Claim under review\n"(.*)"')


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    """No real credentials, base URL, profile or model choice leak in from the machine running the tests."""
    forget_machine_setup(monkeypatch, tmp_path)
    notebook_folder(monkeypatch, tmp_path, db="skills.sqlite")


def never_sleep(monkeypatch):
    """Backoff without retry headers (connection errors) would sleep: make the SDK's computed wait zero."""
    import anthropic

    for cls in (anthropic.Anthropic, anthropic.AsyncAnthropic):
        monkeypatch.setattr(cls, "_calculate_retry_timeout", lambda self, *args, **kwargs: 0.0)


def verdict(refuted: bool, evidence: str = "The quote supports it.", confidence: str = "high") -> dict:
    return {"refuted": refuted, "evidence": evidence, "confidence": confidence}


def upheld(tokens=(120, 30)):
    return tool_message("record_verdict", verdict(False), usage=usage(*tokens))


def refuted(tokens=(120, 30)):
    return tool_message("record_verdict", verdict(True, "The source says otherwise."), usage=usage(*tokens))


def key_of(body: dict) -> tuple[str, int]:
    prompt = body["messages"][0]["content"]
    return CLAIM.search(prompt).group(1), int(SEAT.search(prompt).group(1))


class Router:
    """The Messages API answering each vote by (claim text, voter seat).

    `plan[(claim, seat)]` is a reply or a list of replies, one per attempt (the last one repeats): a Message dict,
    an `Error`, an exception instance (raised in the transport), or HANG."""

    def __init__(self, plan: dict[tuple[str, int], object]):
        self.plan = plan
        self.bodies: list[dict] = []
        self.attempts: collections.Counter = collections.Counter()
        self.retry_counts: dict[tuple[str, int], list[str]] = collections.defaultdict(list)
        self.hanging: list[tuple[str, int]] = []
        self.never = asyncio.Event()  # nobody sets it
        self._lock = threading.Lock()

    def reply_for(self, body: dict, headers: dict) -> object:
        key = key_of(body)
        with self._lock:
            self.bodies.append(body)
            self.attempts[key] += 1
            self.retry_counts[key].append(headers.get("x-stainless-retry-count", "?"))
            attempt = self.attempts[key]
        replies = self.plan[key]
        if not isinstance(replies, list):
            replies = [replies]
        return replies[min(attempt, len(replies)) - 1]

    async def handler(self, request):
        body = json.loads(await request.aread())
        reply = self.reply_for(body, {k.lower(): v for k, v in request.headers.items()})
        if reply == HANG:
            with self._lock:
                self.hanging.append(key_of(body))
            await self.never.wait()
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, Error):
            return httpx2.Response(reply.status, headers=reply.all_headers(), content=json.dumps(reply.body()).encode())
        return httpx2.Response(200, headers={"content-type": "application/json"}, content=json.dumps(reply).encode())

    def model(self, max_retries: int = 2) -> AnthropicModel:
        return AnthropicModel(MODEL_ID, api_key=KEY, max_retries=max_retries,
                              async_http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(self.handler)))


class Deliveries:
    """on_vote: the votes as they land, with every vote's status at that moment; sets `enough` after `wanted`."""

    def __init__(self, wanted: int | None = None, then=None):
        self.claims: dict[int, object] = {}
        self.landed: list[tuple[str, int, str, dict]] = []
        self.wanted, self.then = wanted, then
        self.enough = asyncio.Event()

    def __call__(self, claim, vote):
        self.claims[claim.index] = claim
        if vote.status == "pending":
            return
        snapshot = {(c.claim.claim, x.voter): x.status for c in self.claims.values() for x in c.votes}
        self.landed.append((claim.claim.claim, vote.voter, vote.status, snapshot))
        if self.wanted is not None and len(self.landed) == self.wanted:
            self.enough.set()
            if self.then is not None:
                self.then()


def claims_of(*names: str) -> list[Claim]:
    return [Claim(claim=name, quote=f"the quote for {name}", source="https://example.org/" + name.replace(" ", "-"))
            for name in names]


def statuses(claim) -> list[str]:
    return [v.status for v in claim.votes]


def reasons(claim) -> list[str]:
    return [v.reason for v in claim.votes]


# --- the request -------------------------------------------------------------------------------------------------------


def test_the_sdk_sends_the_forced_verdict_tool_and_each_voters_prompt():
    claims = claims_of("tea is a drink", "the moon is cheese")
    router = Router({("tea is a drink", s): upheld((100 + s, 10 * s)) for s in (1, 2, 3)}
                    | {("the moon is cheese", s): refuted() for s in (1, 2, 3)})
    result = asyncio.run(verify(claims, [ModelVoter(router.model(), MODEL_ID)]))

    assert [c.outcome for c in result.claims] == ["confirmed", "refuted"]
    assert len(router.bodies) == 6
    sent_tool = json.loads(json.dumps(VERDICT_TOOL))
    for body in router.bodies:
        assert body["tool_choice"] == {"type": "tool", "name": "record_verdict"}
        assert body["tools"] == [sent_tool]
        assert body["model"] == MODEL_ID and body["max_tokens"] == 1024
        name, seat = key_of(body)
        claim = next(c for c in claims if c.claim == name)
        assert body["messages"] == [{"role": "user", "content": voter_prompt(claim, seat, 3, 2)}]
        assert not body.get("stream")
    assert sorted(key_of(b) for b in router.bodies) == sorted((c.claim, s) for c in claims for s in (1, 2, 3))
    assert result.stats == {"claims": 2, "confirmed": 1, "refuted": 1, "unverified": 0, "not_verified": 0,
                            "agent_calls": 6, "input_tokens": 306 + 360, "output_tokens": 60 + 90}
    assert [v.verdict.evidence for v in result.claims[1].votes] == ["The source says otherwise."] * 3


# --- timeouts ------------------------------------------------------------------------------------------------------------


def test_a_vote_that_times_out_abstains_and_the_others_land():
    router = Router({("alpha", 1): upheld(), ("alpha", 2): HANG, ("alpha", 3): upheld(),
                     ("beta", 1): HANG, ("beta", 2): upheld(), ("beta", 3): HANG})
    deliveries = Deliveries()
    model = router.model()
    model.async_client()  # the SDK imported and its client built before the clock runs: only the hanging votes are slow
    result = asyncio.run(verify(claims_of("alpha", "beta"), [ModelVoter(model, MODEL_ID)], timeout=0.2,
                                on_vote=deliveries))

    alpha, beta = result.claims
    assert statuses(alpha) == ["upheld", "abstained", "upheld"]
    assert alpha.votes[1].reason == "timed out after 0.2 s" and alpha.votes[1].verdict is None
    assert alpha.outcome == "confirmed"  # two valid votes, no refutation
    assert statuses(beta) == ["abstained", "upheld", "abstained"] and beta.outcome == "unverified"
    assert reasons(beta)[0] == reasons(beta)[2] == "timed out after 0.2 s"
    assert sorted(router.hanging) == [("alpha", 2), ("beta", 1), ("beta", 3)]
    assert router.attempts[("alpha", 2)] == 1  # a vote past its time is not retried
    # the answered votes were delivered while the slow ones were still pending: nobody waited for them
    answered = {("alpha", 1), ("alpha", 3), ("beta", 2)}
    assert {(c, s) for c, s, _, _ in deliveries.landed[:3]} == answered
    for _, _, _, snapshot in deliveries.landed[:3]:  # a claim none of whose votes has landed is not known yet
        assert all(snapshot.get(key, "pending") == "pending" for key in router.hanging)
    assert result.stats["agent_calls"] == 6 and result.stats["input_tokens"] == 360
    assert not result.cancelled


# --- overloaded and other HTTP failures ----------------------------------------------------------------------------------


def test_529s_after_the_sdks_retries_abstain_and_the_outcome_follows_the_rule():
    overloaded = Error(529, "Overloaded")
    router = Router({
        ("alpha", 1): overloaded, ("alpha", 2): upheld(), ("alpha", 3): upheld(),  # 2 valid: confirmed
        ("beta", 1): overloaded, ("beta", 2): overloaded, ("beta", 3): upheld(),  # 1 valid: unverified
        ("gamma", 1): refuted(), ("gamma", 2): refuted(), ("gamma", 3): overloaded,  # 2 refutations: refuted
        ("delta", 1): [overloaded, upheld()], ("delta", 2): [Error(429, "slow down"), overloaded, refuted()],
        ("delta", 3): upheld(),  # a retry that succeeds is invisible: 3 valid, 1 refutation: confirmed
    })
    result = asyncio.run(verify(claims_of("alpha", "beta", "gamma", "delta"), [ModelVoter(router.model(), MODEL_ID)]))

    alpha, beta, gamma, delta = result.claims
    assert [c.outcome for c in result.claims] == ["confirmed", "unverified", "refuted", "confirmed"]
    assert all(c.outcome == decide(c.votes, 2) for c in result.claims)
    assert statuses(alpha) == ["abstained", "upheld", "upheld"]
    assert statuses(beta) == ["abstained", "abstained", "upheld"]
    assert statuses(gamma) == ["refuted", "refuted", "abstained"]
    assert statuses(delta) == ["upheld", "refuted", "upheld"]
    for vote in (alpha.votes[0], beta.votes[0], beta.votes[1], gamma.votes[2]):
        assert "HTTP 529" in vote.reason and "after the SDK's retries" in vote.reason and "Overloaded" in vote.reason
        assert "\n" not in vote.reason and KEY not in vote.reason
        assert (vote.input_tokens, vote.output_tokens) == (0, 0)
    assert router.attempts[("alpha", 1)] == 3  # max_retries 2: three attempts, then an abstention
    assert router.retry_counts[("alpha", 1)] == ["0", "1", "2"]
    assert router.attempts[("delta", 1)] == 2 and router.attempts[("delta", 2)] == 3
    assert router.attempts[("alpha", 2)] == 1
    assert result.stats["agent_calls"] == 12  # a vote is one agent call, however many times the SDK retried it
    assert result.stats["input_tokens"] == 120 * 8  # only the answers that came report tokens


def test_a_vote_with_no_retries_abstains_at_the_first_529():
    router = Router({("alpha", 1): Error(529, "Overloaded"), ("alpha", 2): upheld(), ("alpha", 3): refuted()})
    result = asyncio.run(verify(claims_of("alpha"), [ModelVoter(router.model(max_retries=0), MODEL_ID)]))
    assert router.attempts[("alpha", 1)] == 1
    assert statuses(result.claims[0]) == ["abstained", "upheld", "refuted"]
    assert result.claims[0].outcome == "confirmed"  # two valid votes, one refutation (fewer than two)


def test_an_invalid_tool_input_through_the_sdk_is_an_abstention_naming_the_field():
    router = Router({
        ("alpha", 1): upheld(),
        ("alpha", 2): tool_message("record_verdict", {"refuted": "maybe", "evidence": "hmm", "confidence": "high"},
                                   usage=usage(90, 9)),
        ("alpha", 3): tool_message("record_verdict", {"refuted": False, "evidence": "", "confidence": "high"}),
        ("beta", 1): tool_message("record_verdict", {"refuted": True, "confidence": "very", "evidence": "x"}),
        ("beta", 2): tool_message("record_verdict", {"refuted": True, "confidence": "low"}),
        ("beta", 3): refuted(),
    })
    result = asyncio.run(verify(claims_of("alpha", "beta"), [ModelVoter(router.model(), MODEL_ID)]))

    alpha, beta = result.claims
    assert statuses(alpha) == ["upheld", "abstained", "abstained"] and alpha.outcome == "unverified"
    assert reasons(alpha)[1].startswith("invalid verdict: refuted ")
    assert reasons(alpha)[2].startswith("invalid verdict: evidence ")
    assert (alpha.votes[1].input_tokens, alpha.votes[1].output_tokens) == (90, 9)  # the call was made and is counted
    assert statuses(beta) == ["abstained", "abstained", "refuted"] and beta.outcome == "unverified"
    assert reasons(beta)[0].startswith("invalid verdict: confidence ") and "'high', 'medium' or 'low'" in reasons(beta)[0]
    assert reasons(beta)[1] == "invalid verdict: evidence Field required"
    assert all(router.attempts[key] == 1 for key in router.attempts)  # a bad answer is not retried


def test_a_voter_that_answers_in_text_abstains():
    router = Router({("alpha", 1): text_message("Looks right to me."), ("alpha", 2): upheld(),
                     ("alpha", 3): text_message("I refuse to use tools.", usage=usage(50, 7))})
    result = asyncio.run(verify(claims_of("alpha"), [ModelVoter(router.model(), MODEL_ID)]))
    (alpha,) = result.claims
    assert statuses(alpha) == ["abstained", "upheld", "abstained"]
    assert reasons(alpha)[0] == reasons(alpha)[2] == "answered in text instead of the verdict tool"
    assert alpha.outcome == "unverified"  # one valid vote is never a confirmation
    assert alpha.votes[2].input_tokens == 50


def test_when_every_vote_of_a_claim_fails_it_is_unverified_never_confirmed(monkeypatch):
    never_sleep(monkeypatch)
    router = Router({
        ("all overloaded", 1): Error(529, "Overloaded"), ("all overloaded", 2): Error(529, "Overloaded"),
        ("all overloaded", 3): Error(529, "Overloaded"),
        ("all different", 1): Error(500, "Internal server error"),
        ("all different", 2): Error(400, "bad request body"),
        ("all different", 3): httpx2.ConnectError("connection refused"),
        ("all prose", 1): text_message("yes"), ("all prose", 2): text_message("no"),
        ("all prose", 3): tool_message("some_other_tool", {"refuted": False}),
    })
    result = asyncio.run(verify(claims_of("all overloaded", "all different", "all prose"),
                                [ModelVoter(router.model(), MODEL_ID)]))
    assert [c.outcome for c in result.claims] == ["unverified"] * 3
    assert all(v.status == "abstained" and v.verdict is None and v.reason for v in result.votes)
    different = reasons(result.claims[1])
    assert "HTTP 500" in different[0] and "HTTP 400" in different[1] and "retries" not in different[1]
    assert "could not reach the model server" in different[2]
    assert router.attempts[("all different", 2)] == 1 and router.attempts[("all different", 1)] == 3
    assert reasons(result.claims[2]) == ["answered in text instead of the verdict tool"] * 3
    assert result.stats["confirmed"] == 0 and result.stats["unverified"] == 3
    view = VotesView(result)
    assert "0 confirmed, 0 refuted, 3 unverified of 3 claims" in view.text()
    assert re.findall(r"data-outcome='(\w+)'", view.html()) == ["unverified"] * 3


# --- cancellation --------------------------------------------------------------------------------------------------------


def test_a_cancelled_run_keeps_the_votes_already_in_and_the_rest_abstain():
    router = Router({("alpha", 1): upheld(), ("alpha", 2): upheld(), ("alpha", 3): HANG,
                     ("beta", 1): refuted(), ("beta", 2): HANG, ("beta", 3): upheld()})
    deliveries = Deliveries(wanted=3)

    async def main():
        task = asyncio.ensure_future(verify(claims_of("alpha", "beta"), [ModelVoter(router.model(), MODEL_ID)],
                                            concurrency=2, on_vote=deliveries))
        await asyncio.wait_for(deliveries.enough.wait(), 30)  # bounded: a broken run fails here, it does not hang
        task.cancel()
        return await task

    result = asyncio.run(main())

    assert result.cancelled is True
    alpha, beta = result.claims
    landed = [(c, s, status) for c, s, status, _ in deliveries.landed]
    assert landed == [("alpha", 1, "upheld"), ("alpha", 2, "upheld"), ("beta", 1, "refuted")]
    assert statuses(alpha) == ["upheld", "upheld", "abstained"] and reasons(alpha)[2] == "cancelled"
    assert statuses(beta) == ["refuted", "abstained", "abstained"] and reasons(beta)[1:] == ["cancelled", "cancelled"]
    assert alpha.votes[0].verdict is not None and beta.votes[0].verdict.refuted  # the votes already in are kept
    assert alpha.outcome == "confirmed" and beta.outcome == "unverified"
    # with two in flight, beta's third vote never started: no request, no agent call
    assert ("beta", 3) not in router.attempts and beta.votes[2].calls == 0
    assert sorted(router.hanging) == [("alpha", 3), ("beta", 2)]
    assert result.stats["agent_calls"] == 5 == len(router.bodies)
    view = VotesView(result)
    assert view.data()["cancelled"] is True
    assert "cancelled (votes already in are kept)" in view.text()
    assert "cancelled (votes already in are kept)" in view.html()
    assert [v["reason"] for v in view.data()["claims"][1]["votes"][1:]] == ["cancelled", "cancelled"]
    assert "voter 3 (model): cancelled" in view.text()


def interrupted_run_plan() -> Router:
    return Router({("alpha", 1): upheld(), ("alpha", 2): HANG, ("alpha", 3): refuted(),
                   ("beta", 1): HANG, ("beta", 2): upheld(), ("beta", 3): HANG})


def check_interrupted_run(result, router, session, threads, caller):
    assert threads and caller not in threads  # the votes ran in the worker thread's loop
    assert result.cancelled is True
    alpha, beta = result.claims
    assert statuses(alpha) == ["upheld", "abstained", "refuted"] and reasons(alpha)[1] == "cancelled"
    assert statuses(beta) == ["abstained", "upheld", "abstained"] and reasons(beta)[::2] == ["cancelled", "cancelled"]
    assert alpha.outcome == "confirmed" and beta.outcome == "unverified"
    assert sorted(router.hanging) == [("alpha", 2), ("beta", 1), ("beta", 3)]
    assert result.stats["agent_calls"] == 6 and result.stats["input_tokens"] == 360
    texts = [e.text for e in session.ledger.entries("interrupted")]  # the outcomes so far are still recorded
    assert texts == ["claim verified by 3 votes: confirmed (upheld 1, refuted 1, abstained 1): alpha",
                     "claim verified by 3 votes: unverified (upheld 1, refuted 0, abstained 2): beta"]
    assert "cancelled (votes already in are kept)" in VotesView(result).text()


def test_ctrl_c_in_the_caller_cancels_session_verify_and_keeps_the_votes(tmp_path):
    """A real Ctrl-C path: `_thread.interrupt_main()` (the SIGINT handler) once three votes are in."""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # interrupt_main raises KeyboardInterrupt
    router = interrupted_run_plan()
    session = SkillsSession(sources=[Source("session", str(tmp_path / "skills"), True)], cwd=str(tmp_path))
    session.model_client = router.model()
    caller = threading.get_ident()
    threads: set[int] = set()

    def interrupt():  # what Ctrl-C in the notebook does: KeyboardInterrupt in the kernel's main thread
        threads.add(threading.get_ident())
        _thread.interrupt_main()

    deliveries = Deliveries(wanted=3, then=interrupt)
    result = session.verify(claims_of("alpha", "beta"), timeout=60, on_vote=deliveries, ledger_plan="interrupted")
    check_interrupted_run(result, router, session, threads, caller)


def board_outcomes(board: VoteBoard) -> tuple[list[str], list[str]]:
    html = board.html.value
    return re.findall(r"data-outcome='(\w+)'", html), re.findall(r"data-status='(\w+)'", html)


def cancelled_board_run(plan: dict, wanted: int):
    """What `%%skill verify` does with a board (update as on_vote, finish with the summary), cancelled after
    `wanted` votes landed."""
    router = Router(plan)
    claims = claims_of("alpha", "beta")
    board = VoteBoard(claims, 3)
    deliveries = Deliveries(wanted=wanted)

    def on_vote(claim, vote):
        board.update(claim, vote)
        deliveries(claim, vote)

    async def main():
        task = asyncio.ensure_future(verify(claims, [ModelVoter(router.model(), MODEL_ID)], on_vote=on_vote))
        await asyncio.wait_for(deliveries.enough.wait(), 30)
        task.cancel()
        return await task

    result = asyncio.run(main())
    view = VotesView(result)
    board.finish(view.summary(), result.claims)
    return board, result, view


def test_a_cancelled_runs_board_ends_matching_the_result_when_every_claim_had_a_vote_in():
    board, result, _ = cancelled_board_run({("alpha", 1): upheld(), ("alpha", 2): upheld(), ("alpha", 3): HANG,
                                               ("beta", 1): refuted(), ("beta", 2): HANG, ("beta", 3): HANG}, 3)
    assert result.cancelled
    outcomes, votes = board_outcomes(board)
    assert outcomes == [c.outcome for c in result.claims] == ["confirmed", "unverified"]
    assert votes == [v.status for v in result.votes]
    assert "cancelled (votes already in are kept)" in board.html.value


def test_a_cancelled_runs_board_ends_matching_the_result_when_a_claim_had_no_vote_in():
    board, result, _ = cancelled_board_run({("alpha", 1): upheld(), ("alpha", 2): upheld(), ("alpha", 3): upheld(),
                                               ("beta", 1): HANG, ("beta", 2): HANG, ("beta", 3): HANG}, 3)
    assert result.cancelled and [c.outcome for c in result.claims] == ["confirmed", "unverified"]
    outcomes, votes = board_outcomes(board)
    assert outcomes == [c.outcome for c in result.claims]
    assert votes == [v.status for v in result.votes]


# --- the same through a real socket ----------------------------------------------------------------------------------


def test_votes_through_the_local_fake_server(tmp_path):
    lock = threading.Lock()
    attempts: collections.Counter = collections.Counter()
    plan = {("alpha", 1): upheld((200, 20)), ("alpha", 2): Error(529, "Overloaded"), ("alpha", 3): upheld((200, 20)),
            ("beta", 1): refuted((210, 21)), ("beta", 2): [Error(500, "flaky"), refuted((210, 21))],
            ("beta", 3): text_message("prose")}

    def route(recorded):
        key = key_of(recorded.body)
        with lock:
            attempts[key] += 1
            attempt = attempts[key]
        replies = plan[key] if isinstance(plan[key], list) else [plan[key]]
        return replies[min(attempt, len(replies)) - 1]

    with FakeAnthropicServer([route] * 40) as server:
        session = SkillsSession(sources=[Source("session", str(tmp_path / "skills"), True)], cwd=str(tmp_path))
        session.model_client = AnthropicModel(MODEL_ID, api_key=KEY, base_url=server.url)
        result = session.verify(claims_of("alpha", "beta"))
        bodies = [r.body for r in server.requests]

    alpha, beta = result.claims
    assert statuses(alpha) == ["upheld", "abstained", "upheld"] and alpha.outcome == "confirmed"
    assert "HTTP 529" in reasons(alpha)[1]
    assert statuses(beta) == ["refuted", "refuted", "abstained"] and beta.outcome == "refuted"
    assert attempts[("alpha", 2)] == 3 and attempts[("beta", 2)] == 2 and len(bodies) == 3 + 2 + 4
    assert all(b["tool_choice"] == {"type": "tool", "name": "record_verdict"} for b in bodies)
    assert all(b["tools"] == [json.loads(json.dumps(VERDICT_TOOL))] for b in bodies)
    assert all(r.headers.get("x-api-key") == KEY or r.headers.get("authorization") == f"Bearer {KEY}"
               for r in server.requests)
    assert result.stats["input_tokens"] == 200 * 2 + 210 * 2 + 10  # the prose answer reports the fake's default usage
    assert result.stats["agent_calls"] == 6
