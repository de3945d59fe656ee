"""Claim verification by adversarial votes (skills_magic.runs.verify): the rule, the prompt, the verdict schema, the
claims, the concurrent orchestration (on the scripted model), script voters through the permission gate, the
session's ledger observations, and `%%skill verify` through an IPython shell.

Faults through the real Anthropic SDK (timeouts, 529s, cancellation, Ctrl-C) are in test_verify_faults.py.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import threading
import types
from pathlib import Path

import pytest
import yaml
from IPython.core.error import UsageError
from notebook_setup import notebook_folder, registered_magics
from skillfiles import make_skill

from skills_magic.runs import verify as v
from skills_magic.skills.catalog import Source
from skills_magic.notebook.views import VotesView, mime
from skills_magic.models.scripted import ScriptedModel
from skills_magic.session import SkillsSession
from skills_magic.runs.verify import (
    CONCURRENCY,
    MAX_CLAIMS,
    REFUTATIONS_REQUIRED,
    VERDICT_TOOL,
    VERDICT_TOOL_NAME,
    VOTES_PER_CLAIM,
    Claim,
    ClaimsError,
    ModelVoter,
    Vote,
    VoteVerdict,
    decide,
    parse_claims,
    verify,
    voter_prompt,
)

VOTES_MIME = mime("votes")


# --- helpers ---------------------------------------------------------------------------------------------------------


def verdict(refuted: bool, evidence: str = "The quote says so.", confidence: str = "high") -> dict:
    return {"refuted": refuted, "evidence": evidence, "confidence": confidence}


def turn(word: str, voter: int, refuted: bool = False, *, votes: int = 3, delay: float | None = None,
         tokens: tuple[int, int] = (10, 5), input: dict | None = None, text: str | None = None) -> dict:
    """A scripted turn answering exactly one vote: the one for `voter K of N` on the claim containing `word`."""
    answer: dict = {"when": [f"voter {voter} of {votes}", word],
                    "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]}}
    if text is not None:
        answer["text"] = text
    else:
        answer["tool_use"] = [{"name": VERDICT_TOOL_NAME, "input": input if input is not None else verdict(refuted)}]
    if delay:
        answer["delay"] = delay
    return answer


def made_vote(kind: str) -> Vote:
    """'u' upheld, 'r' refuted, 'a' abstained."""
    vote = Vote(0, 1, "model")
    if kind == "u":
        vote.verdict, vote.status = VoteVerdict(**verdict(False)), "upheld"
    elif kind == "r":
        vote.verdict, vote.status = VoteVerdict(**verdict(True)), "refuted"
    else:
        vote.status, vote.reason = "abstained", "failed"
    return vote


def expected_outcome(upheld: int, refuted: int, refutations_required: int) -> str:
    if refuted >= refutations_required:
        return "refuted"
    if upheld + refuted >= refutations_required:
        return "confirmed"
    return "unverified"


def run(coroutine):
    return asyncio.run(coroutine)


def claims_of(*words: str) -> list[Claim]:
    return [Claim(claim=f"The {w} claim holds", quote=f"a quote about {w}", source=f"{w}.txt") for w in words]


# --- the rule ----------------------------------------------------------------------------------------------------------


COMBINATIONS = [(r, a) for r in range(4) for a in range(4) if r + a <= 3]


@pytest.mark.parametrize("refutations, abstentions", COMBINATIONS)
def test_decide_every_combination_of_three_votes_with_two_refutations_required(refutations, abstentions):
    upheld = 3 - refutations - abstentions
    votes = [made_vote("r")] * refutations + [made_vote("a")] * abstentions + [made_vote("u")] * upheld
    valid = refutations + upheld
    outcome = decide(votes, 2)
    if refutations >= 2:
        assert outcome == "refuted"
    elif valid >= 2:
        assert outcome == "confirmed"
    else:
        assert outcome == "unverified"
    assert outcome == expected_outcome(upheld, refutations, 2)
    assert decide(list(reversed(votes)), 2) == outcome  # the order of the votes does not matter
    assert decide(votes) == outcome  # 2 is the default


def test_abstentions_never_pass():
    assert decide([made_vote("a")] * 3) == "unverified"
    assert decide([made_vote("u"), made_vote("a"), made_vote("a")]) == "unverified"  # one valid vote is not enough
    assert decide([made_vote("u"), made_vote("u"), made_vote("a")]) == "confirmed"
    assert decide([made_vote("u"), made_vote("r"), made_vote("a")]) == "confirmed"  # one refutation is fewer than two
    assert decide([made_vote("r"), made_vote("r"), made_vote("a")]) == "refuted"
    assert decide([]) == "unverified"
    pending = Vote(0, 1, "model")  # a vote not in yet counts as no vote
    assert decide([pending, made_vote("u")]) == "unverified"


@pytest.mark.parametrize("votes, required", [(5, 3), (1, 1), (4, 2), (2, 1)])
def test_decide_for_other_vote_counts_and_thresholds(votes, required):
    seen = set()
    for kinds in itertools.combinations_with_replacement("ura", votes):
        upheld, refuted = kinds.count("u"), kinds.count("r")
        outcome = decide([made_vote(k) for k in kinds], required)
        assert outcome == expected_outcome(upheld, refuted, required), kinds
        seen.add(outcome)
    assert seen == {"confirmed", "refuted", "unverified"}


def test_decide_five_votes_three_refutations_spot_checks():
    def kinds(text):
        return [made_vote(k) for k in text]

    assert decide(kinds("uuaaa"), 3) == "unverified"
    assert decide(kinds("uuuaa"), 3) == "confirmed"
    assert decide(kinds("rruaa"), 3) == "confirmed"  # three valid votes, two refutations: fewer than three
    assert decide(kinds("rrraa"), 3) == "refuted"
    assert decide(kinds("rraaa"), 3) == "unverified"
    assert decide(kinds("u"), 1) == "confirmed" and decide(kinds("r"), 1) == "refuted" and decide(kinds("a"), 1) == "unverified"


def test_the_constants():
    assert (VOTES_PER_CLAIM, REFUTATIONS_REQUIRED, MAX_CLAIMS, CONCURRENCY) == (3, 2, 25, 8)
    assert v.VOTE_TIMEOUT_SECONDS > 0


# --- the prompt --------------------------------------------------------------------------------------------------------


def test_the_prompt_has_the_role_the_claim_the_checklist_and_the_rule():
    claim = Claim(claim="Tea cures colds", quote="In our trial, tea drinkers felt better", source="blog.example/tea")
    prompt = voter_prompt(claim, 2, 3, 2)
    assert "voter 2 of 3" in prompt.splitlines()[0] and prompt.startswith("## Adversarial claim verifier")
    assert '"Tea cures colds"' in prompt and '"In our trial, tea drinkers felt better"' in prompt
    assert "**Source:** blog.example/tea" in prompt
    assert "2 refutations out of 3 votes" in prompt
    checklist = re.findall(r"^(\d)\. (.+)$", prompt, re.MULTILINE)
    assert [n for n, _ in checklist] == ["1", "2", "3", "4"]
    items = " ".join(text for _, text in checklist)
    for phrase in ("supported by the quote", "overreach", "source's quality", "outdated", "marketing claim",
                   "cherry-picked benchmark", "speculation"):
        assert phrase in items
    assert "refuted=false ONLY if the claim is well supported by the quote, current, and the source's quality matches" in prompt
    assert "Default to refuted=true when uncertain." in prompt
    assert VERDICT_TOOL_NAME in prompt
    assert prompt.index("Claim under review") < prompt.index("Checklist") < prompt.index("Decision rule")


def test_the_prompt_without_a_source_has_no_source_line():
    prompt = voter_prompt(Claim(claim="x is y", quote="q"), 1)
    assert "Source" not in prompt and "voter 1 of 3" in prompt  # the defaults: 3 votes, 2 refutations
    assert "2 refutations out of 3 votes" in prompt


def test_different_voters_get_different_titles():
    claim = Claim(claim="A", quote="B")
    prompts = [voter_prompt(claim, i, 5, 3) for i in range(1, 6)]
    titles = [p.splitlines()[0] for p in prompts]
    assert len(set(titles)) == 5
    assert titles == [f"## Adversarial claim verifier (voter {i} of 5)" for i in range(1, 6)]
    assert all("3 refutations out of 5 votes" in p for p in prompts)
    assert len({p.replace(t, "") for p, t in zip(prompts, titles)}) == 1  # only the title differs


def test_the_model_voter_request_forces_the_verdict_tool():
    voter = ModelVoter(ScriptedModel([]), "claude-x")
    request = voter.request(Claim(claim="A", quote="B"), 2, 3, 2)
    assert request["tool_choice"] == {"type": "tool", "name": "record_verdict"}
    assert request["tools"] == [VERDICT_TOOL] and request["model"] == "claude-x"
    assert request["max_tokens"] == v.VOTE_MAX_TOKENS
    assert request["messages"] == [{"role": "user", "content": voter_prompt(Claim(claim="A", quote="B"), 2, 3, 2)}]


# --- the verdict schema ------------------------------------------------------------------------------------------------


def test_the_tool_schema_is_the_models_json_schema():
    assert VERDICT_TOOL["name"] == "record_verdict"
    assert VERDICT_TOOL["input_schema"] == VoteVerdict.model_json_schema()
    schema = VERDICT_TOOL["input_schema"]
    assert schema["type"] == "object"
    assert set(schema["required"]) == {"refuted", "evidence", "confidence"}
    assert schema["properties"]["refuted"]["type"] == "boolean"
    assert schema["properties"]["evidence"]["minLength"] == 1
    assert schema["properties"]["confidence"]["enum"] == ["high", "medium", "low"]
    assert "counter_source" in schema["properties"]
    json.dumps(VERDICT_TOOL)  # sendable as is


INVALID_INPUTS = [
    ({"refuted": False, "confidence": "high"}, "evidence", "Field required"),
    ({"refuted": False, "evidence": "", "confidence": "high"}, "evidence", "at least 1 character"),
    ({"refuted": False, "evidence": "ok", "confidence": "very"}, "confidence", "'high', 'medium' or 'low'"),
    ({"refuted": "maybe", "evidence": "ok", "confidence": "high"}, "refuted", "boolean"),
    ({"evidence": "ok", "confidence": "high"}, "refuted", "Field required"),
    ({"refuted": True, "evidence": "ok", "confidence": "high", "counter_source": 7}, "counter_source", "string"),
]


@pytest.mark.parametrize("tool_input, field, problem", INVALID_INPUTS)
def test_an_invalid_tool_input_is_an_abstention_naming_the_field(tool_input, field, problem):
    model = ScriptedModel([turn("alpha", voter, input=tool_input, tokens=(30, 7)) for voter in (1, 2, 3)])
    result = run(verify(claims_of("alpha"), [ModelVoter(model, "m")]))
    (claim,) = result.claims
    assert claim.outcome == "unverified"
    for vote in claim.votes:
        assert vote.status == "abstained" and vote.verdict is None
        assert vote.reason.startswith(f"invalid verdict: {field} ") and problem in vote.reason
        assert (vote.input_tokens, vote.output_tokens, vote.calls) == (30, 7, 1)  # the call was made and counted
    assert result.stats["agent_calls"] == 3 and result.stats["input_tokens"] == 90


def test_a_text_answer_is_an_abstention():
    model = ScriptedModel([turn("alpha", voter, text="I think it is fine.") for voter in (1, 2, 3)])
    result = run(verify(claims_of("alpha"), [ModelVoter(model, "m")]))
    assert [v_.reason for v_ in result.votes] == ["answered in text instead of the verdict tool"] * 3
    assert result.claims[0].outcome == "unverified"


def test_a_valid_verdict_with_a_counter_source_and_another_tools_call_ignored():
    answer = {"when": ["voter 1 of 1", "alpha"], "content": [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "t1", "name": "some_other_tool", "input": {"refuted": False}},
        {"type": "tool_use", "id": "t2", "name": VERDICT_TOOL_NAME,
         "input": {**verdict(True, "Contradicted by the source."), "counter_source": "https://example.org/x"}},
    ]}
    result = run(verify(claims_of("alpha"), [ModelVoter(ScriptedModel([answer]), "m")], votes_per_claim=1,
                        refutations_required=1))
    (vote,) = result.votes
    assert vote.status == "refuted" and vote.verdict.counter_source == "https://example.org/x"
    assert vote.to_dict() == {"claim": 0, "voter": 1, "kind": "model", "status": "refuted", "refuted": True,
                              "evidence": "Contradicted by the source.", "confidence": "high",
                              "counter_source": "https://example.org/x"}
    assert result.claims[0].outcome == "refuted"


def test_whitespace_only_evidence_is_an_abstention():
    model = ScriptedModel([turn("alpha", voter, input=verdict(False, "   ")) for voter in (1, 2, 3)])
    result = run(verify(claims_of("alpha"), [ModelVoter(model, "m")]))
    assert all(vote.status == "abstained" for vote in result.votes)
    assert result.claims[0].outcome == "unverified"


# --- the claims --------------------------------------------------------------------------------------------------------


def test_parse_claims_reads_a_yaml_list_of_mappings_and_plain_strings():
    data = yaml.safe_load("""
- claim: The file covers four days
  quote: "2026-11-01 ... 2026-11-04"
  source: weather.csv
- A plain string is a claim
- claim: No source here
  quote: q
""")
    claims = parse_claims(data)
    assert claims == [
        Claim(claim="The file covers four days", quote="2026-11-01 ... 2026-11-04", source="weather.csv"),
        Claim(claim="A plain string is a claim", quote="", source=None),
        Claim(claim="No source here", quote="q", source=None),
    ]
    assert parse_claims(None) == [] and parse_claims([]) == []


@pytest.mark.parametrize("data", [{"claim": "x"}, "just text", 42, {"claims": [{"claim": "x"}]}])
def test_parse_claims_rejects_what_is_not_a_list(data):
    with pytest.raises(ClaimsError, match="YAML list"):
        parse_claims(data)


@pytest.mark.parametrize("bad, problem", [
    ({"quote": "no claim text"}, "claim Field required"),
    ({"claim": ""}, "claim String should have at least 1 character"),
    ({"claim": None}, "claim"),
    (["a", "list"], "valid dictionary"),
])
def test_a_claim_without_text_names_its_number(bad, problem):
    with pytest.raises(ClaimsError) as raised:
        parse_claims(["first", {"claim": "second", "quote": "q"}, bad])
    message = str(raised.value)
    assert message.startswith("claim 3:") and problem in message and "\n" not in message
    assert isinstance(raised.value, ValueError)


def test_a_whitespace_only_claim_is_a_claim_without_text():
    with pytest.raises(ClaimsError, match="claim 2"):
        parse_claims(["first", {"claim": "   ", "quote": "q"}])


# --- orchestration -----------------------------------------------------------------------------------------------------


class Deliveries:
    """An on_vote that records, at each delivery, the status of every vote it knows of (pending flags, not times).

    on_vote hears each vote once, when it lands; a claim none of whose votes has landed yet is not known here, so
    its votes count as pending (`status_at`)."""

    def __init__(self):
        self.claims: dict[int, v.ClaimResult] = {}
        self.pending: list[tuple[int, int]] = []  # deliveries of votes still pending (there must be none)
        self.landed: list[tuple[int, int, str, dict[tuple[int, int], str]]] = []
        self.thread_ids: set[int] = set()

    def __call__(self, claim, vote):
        self.thread_ids.add(threading.get_ident())
        self.claims[claim.index] = claim
        if vote.status == "pending":
            self.pending.append((claim.index, vote.voter))
            return
        snapshot = {(c.index, x.voter): x.status for c in self.claims.values() for x in c.votes}
        self.landed.append((claim.index, vote.voter, vote.status, snapshot))

    @staticmethod
    def status_at(snapshot, key) -> str:
        return snapshot.get(key, "pending")


def test_every_vote_is_delivered_as_soon_as_it_is_done_fast_ones_first():
    fast = {(0, 1), (0, 2), (1, 3)}
    words = ["alpha", "beta"]
    turns = [turn(words[c], voter, refuted=(c == 1), delay=None if (c, voter) in fast else 0.5)
             for c in range(2) for voter in (1, 2, 3)]
    model = ScriptedModel(turns)
    deliveries = Deliveries()
    result = run(verify(claims_of(*words), [ModelVoter(model, "m")], on_vote=deliveries))

    assert deliveries.pending == []  # each vote is heard once, when it lands
    assert len(deliveries.landed) == 6
    assert len({(c, s) for c, s, _, _ in deliveries.landed}) == 6  # each vote delivered once
    first = deliveries.landed[:3]
    assert {(c, s) for c, s, _, _ in first} == fast
    every = [(c, s) for c in range(2) for s in (1, 2, 3)]
    for number, (claim, seat, status, snapshot) in enumerate(deliveries.landed, 1):
        assert snapshot[(claim, seat)] == status != "pending"
        assert status == result.claims[claim].votes[seat - 1].status  # delivered with its final status
        # delivered before any other vote landed
        assert sum(Deliveries.status_at(snapshot, key) != "pending" for key in every) == number
    for _, _, _, snapshot in first:
        assert all(Deliveries.status_at(snapshot, key) == "pending" for key in every if key not in fast)  # still running
    assert [c.outcome for c in result.claims] == ["confirmed", "refuted"]
    assert [x.status for x in result.votes] == ["upheld"] * 3 + ["refuted"] * 3


class CountingModel:
    """A model client that counts calls in flight (under a lock) and answers once the limit is reached."""

    name = "counting"

    def __init__(self, target: int):
        self.target = target
        self.lock = threading.Lock()
        self.in_flight = 0
        self.peak = 0
        self.calls = 0
        self.reached: asyncio.Event | None = None

    async def acreate(self, request):
        if self.reached is None:
            self.reached = asyncio.Event()
        with self.lock:
            self.in_flight += 1
            self.calls += 1
            self.peak = max(self.peak, self.in_flight)
            if self.in_flight >= self.target:
                self.reached.set()
        try:
            try:  # bounded: if the limit is never reached the test fails on `peak`, it does not hang
                await asyncio.wait_for(self.reached.wait(), 10)
            except asyncio.TimeoutError:
                pass
            return {"content": [{"type": "tool_use", "id": "t", "name": VERDICT_TOOL_NAME, "input": verdict(False)}],
                    "usage": {"input_tokens": 100, "output_tokens": 10}}
        finally:
            with self.lock:
                self.in_flight -= 1


@pytest.mark.parametrize("claims, concurrency", [(4, 4), (3, 9), (5, 8), (2, 1)])
def test_votes_of_all_claims_run_concurrently_under_the_limit(claims, concurrency):
    model = CountingModel(min(concurrency, claims * 3))
    words = [f"w{i}x" for i in range(claims)]
    result = run(verify(claims_of(*words), [ModelVoter(model, "m")], concurrency=concurrency, timeout=30))
    assert model.peak == min(concurrency, claims * 3)  # reached, never exceeded
    assert model.calls == claims * 3
    assert all(c.outcome == "confirmed" for c in result.claims)
    assert result.stats == {"claims": claims, "confirmed": claims, "refuted": 0, "unverified": 0, "not_verified": 0,
                            "agent_calls": claims * 3, "input_tokens": claims * 300, "output_tokens": claims * 30}


def test_stats_count_agent_calls_and_sum_the_reported_tokens():
    words = ["alpha", "beta", "gamma"]
    turns, expected_in, expected_out = [], 0, 0
    for c, word in enumerate(words):
        for voter in (1, 2, 3):
            tokens = (100 * (c + 1) + voter, 10 * voter + c)
            expected_in, expected_out = expected_in + tokens[0], expected_out + tokens[1]
            turns.append(turn(word, voter, refuted=(word == "gamma" and voter != 2), tokens=tokens))
    model = ScriptedModel(turns)
    result = run(verify(claims_of(*words), [ModelVoter(model, "m")]))
    assert result.stats == {"claims": 3, "confirmed": 2, "refuted": 1, "unverified": 0, "not_verified": 0,
                            "agent_calls": 9, "input_tokens": expected_in, "output_tokens": expected_out}
    assert len(model.requests) == 9 and model.remaining == 0
    assert sorted(re.search(r"voter (\d) of 3", r["messages"][0]["content"]).group(1) for r in model.requests) == list("111222333")
    assert [(x.claim, x.voter, x.kind) for x in result.votes] == [(c, s, "model") for c in range(3) for s in (1, 2, 3)]
    assert result.seconds > 0 and all(x.seconds >= 0 for x in result.votes)
    assert not result.cancelled


def test_more_claims_than_the_limit_are_reported_not_dropped():
    words = ["alpha", "beta", "gamma", "delta"]
    model = ScriptedModel([turn(w, s) for w in words[:2] for s in (1, 2, 3)])
    claims = claims_of(*words)
    result = run(verify(claims, [ModelVoter(model, "m")], max_claims=2))
    assert [c.claim for c in result.claims] == claims[:2]
    assert result.not_verified == claims[2:]
    assert len(model.requests) == 6  # nobody voted on the others
    assert result.stats["claims"] == 2 and result.stats["not_verified"] == 2 and result.stats["confirmed"] == 2
    view = VotesView(result)
    text = view.text()
    for c in claims[2:]:
        assert f"NOT VERIFIED (over the limit)  {c.claim}" in text
        assert c.claim in view.html()
    assert "2 more not verified (over the limit of 2)" in text
    data = view.data()
    assert data["not_verified"] == [c.model_dump(exclude_none=True) for c in claims[2:]]
    assert data["stats"]["not_verified"] == 2


def test_the_default_limit_is_twenty_five_claims():
    claims = [Claim(claim=f"claim number {i:02d}") for i in range(27)]

    class Upheld(v.Voter):
        kind = "model"

        async def vote(self, vote, claim, votes, refutations):
            vote.calls += 1
            vote.verdict = VoteVerdict(**verdict(False))

    result = run(verify(claims, [Upheld()]))
    assert len(result.claims) == 25 and result.not_verified == claims[25:]
    assert result.stats["agent_calls"] == 75


def test_an_empty_claim_list_is_an_empty_result_without_any_model_call():
    model = ScriptedModel([turn("alpha", 1)])
    deliveries = Deliveries()
    result = run(verify([], [ModelVoter(model, "m")], on_vote=deliveries))
    assert result.claims == [] and result.not_verified == [] and result.votes == []
    assert result.stats == {"claims": 0, "confirmed": 0, "refuted": 0, "unverified": 0, "not_verified": 0,
                            "agent_calls": 0, "input_tokens": 0, "output_tokens": 0}
    assert model.requests == [] and deliveries.landed == [] and deliveries.pending == []
    assert not result.cancelled
    view = VotesView(result)
    assert view.data()["claims"] == [] and "0 confirmed, 0 refuted, 0 unverified of 0 claims" in view.text()


@pytest.mark.parametrize("options", [{"votes_per_claim": 0}, {"refutations_required": 0}, {"concurrency": 0}])
def test_nonsense_options_are_refused(options):
    with pytest.raises(ValueError, match="at least 1"):
        run(verify(claims_of("alpha"), [ModelVoter(ScriptedModel([]), "m")], **options))


def test_no_voter_is_refused():
    with pytest.raises(ValueError, match="voter"):
        run(verify(claims_of("alpha"), []))


def test_a_voter_that_raises_abstains_and_the_others_count():
    class Flaky(v.Voter):
        kind = "flaky"

        async def vote(self, vote, claim, votes, refutations):
            vote.calls += 1
            if vote.voter == 2:
                raise RuntimeError("voter two broke")
            vote.verdict = VoteVerdict(**verdict(vote.voter == 3))

    result = run(verify(claims_of("alpha"), [Flaky()]))
    assert [x.status for x in result.votes] == ["upheld", "abstained", "refuted"]
    assert result.votes[1].reason == "RuntimeError: voter two broke"
    assert result.claims[0].outcome == "confirmed"  # two valid votes, one refutation


def test_seats_rotate_over_the_voters_given():
    class Seat(v.Voter):
        def __init__(self, kind):
            self.kind = kind

        async def vote(self, vote, claim, votes, refutations):
            vote.verdict = VoteVerdict(**verdict(False, f"{self.kind} sat at {vote.voter}"))

    result = run(verify(claims_of("alpha"), [Seat("a"), Seat("b")], votes_per_claim=5, refutations_required=3))
    assert [x.kind for x in result.votes] == ["a", "b", "a", "b", "a"]
    assert [x.verdict.evidence for x in result.votes] == [f"{k} sat at {i}" for i, k in enumerate("ababa", 1)]


# --- script voters and the session ----------------------------------------------------------------------------------


VOTE_SCRIPT = """import json, sys
claim = json.load(sys.stdin)
print(json.dumps({"refuted": "moon" in claim["claim"],
                  "evidence": "script voter %d of %d read: %s" % (claim["voter"], claim["votes"], claim["quote"]),
                  "confidence": "medium"}))
"""
GARBAGE_SCRIPT = "print('this is not a verdict')\n"
PARTIAL_SCRIPT = "import json\nprint(json.dumps({'refuted': False, 'confidence': 'high'}))\n"
FAILING_SCRIPT = "import sys\nsys.stderr.write('the vote script broke')\nsys.exit(3)\n"


@pytest.fixture
def place(tmp_path, monkeypatch) -> Path:
    notebook_folder(monkeypatch, tmp_path, db="skills.sqlite")
    folder = tmp_path / "skills" / "x"
    make_skill(folder, name="x", description="Votes on claims. Use when verifying.")
    for name, text in {"vote.py": VOTE_SCRIPT, "garbage.py": GARBAGE_SCRIPT, "partial.py": PARTIAL_SCRIPT,
                       "fail.py": FAILING_SCRIPT}.items():
        (folder / "scripts").mkdir(exist_ok=True)
        (folder / "scripts" / name).write_text(text, encoding="utf-8")
    return tmp_path


@pytest.fixture
def session(place) -> SkillsSession:
    # no database warm-up: the concurrent script votes open the project's fresh database file from several threads
    # at once (switching a new file to WAL used to fail there with "database is locked": fixed in db.py)
    return SkillsSession(sources=[Source("session", str(place / "skills"), explicit=True)], cwd=str(place))


SCRIPT = "script:x:scripts/vote.py"


def test_a_script_voter_without_an_allow_rule_abstains(session):
    session.asker = lambda request: "always"  # a vote never stops to ask, whoever would answer
    result = session.verify(claims_of("alpha"), voters=[SCRIPT] * 3)
    assert result.claims[0].outcome == "unverified"
    for vote in result.votes:
        assert vote.status == "abstained" and vote.kind == SCRIPT
        assert vote.reason.startswith("denied: nobody can answer a permission prompt here")
        assert "%skills allow x:scripts/vote.py" in vote.reason
    denials = [r for r in session.audit() if r["event"] == "decision"]
    assert len(denials) == 3 and {r["decision"] for r in denials} == {"deny"}
    assert not any(r["event"] == "run" for r in session.audit())
    assert not any(rule.origin.startswith("asked") for rule in session.policy.rules)


def test_concurrent_script_votes_on_a_fresh_database_never_abstain_for_a_locked_file(place, monkeypatch):
    for number in range(5):  # each run opens a new project file from up to eight threads at once
        monkeypatch.setenv("SKILLS_MAGIC_DB", str(place / f"fresh-{number}.sqlite"))
        session = SkillsSession(sources=[Source("session", str(place / "skills"), explicit=True)], cwd=str(place))
        result = session.verify(claims_of("alpha", "beta"), votes=8, voters=[SCRIPT] * 8)
        assert [x.reason.split(":")[0] for x in result.votes] == ["denied"] * 16, [x.reason for x in result.votes]
        assert len([r for r in session.audit() if r["event"] == "decision"]) == 16


def test_a_script_voter_with_an_allow_rule_votes(session):
    session.add_rule("allow", "x:scripts/*")
    claims = [Claim(claim="The sun is hot", quote="sun quote"), Claim(claim="The moon is cheese", quote="moon quote")]
    deliveries = Deliveries()
    result = session.verify(claims, voters=[SCRIPT] * 3, on_vote=deliveries)
    assert [c.outcome for c in result.claims] == ["confirmed", "refuted"]
    assert [x.status for x in result.votes] == ["upheld"] * 3 + ["refuted"] * 3
    assert [x.verdict.evidence for x in result.claims[1].votes] == [
        f"script voter {i} of 3 read: moon quote" for i in (1, 2, 3)]
    assert result.stats["agent_calls"] == 6 and result.stats["input_tokens"] == 0
    assert len(deliveries.landed) == 6 and deliveries.pending == []
    runs = [r for r in session.audit() if r["event"] == "run"]
    assert len(runs) == 6 and {r["exit_code"] for r in runs} == {0}
    assert deliveries.thread_ids and threading.get_ident() not in deliveries.thread_ids  # the worker thread's loop


@pytest.mark.parametrize("script, reason", [
    ("scripts/garbage.py", "the script's output is not a verdict"),
    ("scripts/partial.py", "the script's output is not a verdict: Field required"),
    ("scripts/fail.py", "scripts/fail.py exit code 3: the vote script broke"),
    ("scripts/missing.py", "is not a file in the skill's folder"),
])
def test_a_script_voter_that_fails_abstains(session, script, reason):
    session.add_rule("allow", "x:scripts/*")
    result = session.verify(claims_of("alpha"), voters=[f"script:x:{script}"] * 3)
    assert result.claims[0].outcome == "unverified"
    for vote in result.votes:
        assert vote.status == "abstained" and reason in vote.reason and vote.verdict is None


def test_mixed_seats_script_first_then_model_seats(session):
    session.add_rule("allow", "x:scripts/*")
    session.model_client = ScriptedModel([turn("alpha", 2, tokens=(50, 5)), turn("alpha", 3, refuted=True, tokens=(60, 6))])
    result = session.verify(claims_of("alpha"), votes=3, voters=[SCRIPT, "model"])
    votes = result.votes
    assert [x.kind for x in votes] == [SCRIPT, "model", "model"]
    assert [x.status for x in votes] == ["upheld", "upheld", "refuted"]
    assert votes[0].verdict.evidence.startswith("script voter 1 of 3")
    prompts = [r["messages"][0]["content"] for r in session.model_client.requests]
    assert sorted(re.search(r"voter \d of 3", p).group(0) for p in prompts) == ["voter 2 of 3", "voter 3 of 3"]
    assert all(r["model"] == "claude-sonnet-5-5" for r in session.model_client.requests)
    assert result.claims[0].outcome == "confirmed"
    assert result.stats["agent_calls"] == 3 and result.stats["input_tokens"] == 110


def test_without_voters_every_seat_is_the_model_and_options_reach_the_run(session):
    session.model_client = ScriptedModel([turn(w, s, votes=2, refuted=(w == "beta")) for w in ("alpha", "beta")
                                          for s in (1, 2)])
    result = session.verify(claims_of("alpha", "beta", "gamma"), votes=2, refutations=1, concurrency=1, max_claims=2,
                            model="opus", timeout=30)
    assert (result.votes_per_claim, result.refutations_required) == (2, 1)
    assert [c.outcome for c in result.claims] == ["confirmed", "refuted"]
    assert [c.claim for c in result.not_verified] == ["The gamma claim holds"]
    assert {r["model"] for r in session.model_client.requests} == {"claude-opus-5-5"}
    assert all("1 refutations out of 2 votes" in r["messages"][0]["content"] for r in session.model_client.requests)


def test_a_bad_voter_spec_or_an_unknown_skill_is_refused_before_any_vote(session):
    session.model_client = ScriptedModel([])
    with pytest.raises(ValueError, match="`model` or `script:SKILL:PATH`"):
        session.verify(claims_of("alpha"), voters=["bogus"])
    with pytest.raises(ValueError):
        session.verify(claims_of("alpha"), voters=["script:nobody"])
    from skills_magic.errors import SkillNotFound

    with pytest.raises(SkillNotFound):
        session.verify(claims_of("alpha"), voters=["script:no-such-skill:scripts/vote.py"])
    assert session.model_client.requests == []


def test_the_ledger_gets_one_observation_per_claim_naming_its_outcome(session):
    words = ["alpha", "beta", "gamma"]
    turns = [turn("alpha", s) for s in (1, 2, 3)] + [turn("beta", s, refuted=True) for s in (1, 2, 3)]
    turns += [turn("gamma", 1), turn("gamma", 2, text="prose"), turn("gamma", 3, input={"refuted": False})]
    session.model_client = ScriptedModel(turns)
    result = session.verify(claims_of(*words), ledger_plan="claims-demo")
    assert [c.outcome for c in result.claims] == ["confirmed", "refuted", "unverified"]
    assert session.plan == "sci.claims-demo"
    entries = list(session.ledger.entries("claims-demo"))
    assert [e.kind for e in entries] == ["observation"] * 3
    texts = [e.text for e in entries]
    assert texts[0] == ("claim verified by 3 votes: confirmed (upheld 3, refuted 0, abstained 0): The alpha claim holds")
    assert texts[1] == ("claim verified by 3 votes: refuted (upheld 0, refuted 3, abstained 0): The beta claim holds")
    assert texts[2] == ("claim verified by 3 votes: unverified (upheld 1, refuted 0, abstained 2): The gamma claim holds")


def test_without_a_plan_nothing_is_written_to_the_ledger(session):
    session.model_client = ScriptedModel([turn("alpha", s) for s in (1, 2, 3)])
    session.verify(claims_of("alpha"))
    assert list(session.ledger.entries()) == [] and session.plan is None


# --- %%skill verify through an IPython shell ------------------------------------------------------------------------


VOTE_TURNS = {"turns": (
    [turn("four days", s, tokens=(400 + s, 40 + s)) for s in (1, 2, 3)]
    + [turn("every day", 1), turn("every day", 2, refuted=True), turn("every day", 3, refuted=True)]
    + [turn("wettest", 1, text="It was wet."), turn("wettest", 2, input={"refuted": False, "evidence": "x", "confidence": "very"}),
       turn("wettest", 3)]
)}
CELL = """\
- claim: The file covers four days
  quote: "2026-11-01 ... 2026-11-04"
  source: weather.csv
- claim: A temperature was recorded every day
  quote: "2026-11-03,north,,2.4"
- claim: November was the wettest month
  quote: "rain_mm: 0.0, n/a, 2.4, 1.1"
"""
OUTCOMES = ["confirmed", "refuted", "unverified"]


@pytest.fixture
def magics(ip, tmp_path, monkeypatch):
    notebook_folder(monkeypatch, tmp_path, db="skills.sqlite", lock=None, sources="bundled")
    (tmp_path / "votes.yaml").write_text(yaml.safe_dump(VOTE_TURNS), encoding="utf-8")
    with registered_magics(ip) as instance:
        ip.run_line_magic("skills", "model scripted votes.yaml")
        yield instance


def verify_cell(ip, line: str = "", cell: str = CELL):
    return ip.run_cell_magic("skill", ("verify " + line).strip(), cell)


def test_the_magic_returns_a_votes_view_with_outcomes_votes_and_stats(ip, magics):
    view = verify_cell(ip)
    assert isinstance(view, VotesView)
    data = view.data()
    assert [c["outcome"] for c in data["claims"]] == OUTCOMES
    assert data["claims"][0]["claim"] == {"claim": "The file covers four days", "quote": "2026-11-01 ... 2026-11-04",
                                          "source": "weather.csv"}
    statuses = [[x["status"] for x in c["votes"]] for c in data["claims"]]
    assert statuses == [["upheld"] * 3, ["upheld", "refuted", "refuted"], ["abstained", "abstained", "upheld"]]
    wettest = data["claims"][2]["votes"]
    assert wettest[0]["reason"] == "answered in text instead of the verdict tool"
    assert wettest[1]["reason"].startswith("invalid verdict: confidence")
    assert data["claims"][0]["votes"][0] == {"claim": 0, "voter": 1, "kind": "model", "status": "upheld", "refuted": False,
                                             "evidence": "The quote says so.", "confidence": "high"}
    assert data["stats"] == {"claims": 3, "confirmed": 1, "refuted": 1, "unverified": 1, "not_verified": 0,
                             "agent_calls": 9, "input_tokens": 1206 + 60, "output_tokens": 126 + 30}
    assert (data["votes_per_claim"], data["refutations_required"], data["cancelled"]) == (3, 2, False)
    assert data["not_verified"] == []

    bundle, metadata = view._repr_mimebundle_()
    assert {"text/plain", "text/html", VOTES_MIME} <= set(bundle)
    assert bundle[VOTES_MIME] == data
    assert "seconds" in metadata[VOTES_MIME] and len(metadata[VOTES_MIME]["vote_seconds"]) == 9
    assert "seconds" not in json.dumps(bundle[VOTES_MIME])  # times only in the metadata
    assert "1 confirmed, 1 refuted, 1 unverified of 3 claims; 9 agent calls, 1,266 input / 156 output tokens" in bundle["text/plain"]

    html = bundle["text/html"]
    assert re.findall(r"data-outcome='(\w+)'", html) == OUTCOMES
    assert re.findall(r"data-status='(\w+)'", html) == [s for row in statuses for s in row]
    assert "title='voter 1 (model): answered in text instead of the verdict tool'" in html
    assert "title='voter 1 (model), high confidence: The quote says so.'" in html
    text = bundle["text/plain"]
    assert " 1. CONFIRMED  [✓ ✓ ✓]  The file covers four days" in text
    assert " 3. UNVERIFIED [– – ✓]  November was the wettest month" in text


def test_two_runs_give_the_same_data(ip, magics):
    first = verify_cell(ip).data()
    ip.run_line_magic("skills", "model scripted votes.yaml")
    assert verify_cell(ip, "--concurrency 1").data() == first  # concurrency does not change the answers


def test_the_magic_passes_its_options(ip, magics):
    data = verify_cell(ip, "--votes 3 --refutations 3 --concurrency 2 --max-claims 2 --timeout 30 --model opus").data()
    assert (data["votes_per_claim"], data["refutations_required"]) == (3, 3)
    assert [c["outcome"] for c in data["claims"]] == ["confirmed", "confirmed"]  # 2 refutations < 3
    assert [c["claim"] for c in data["not_verified"]] == ["November was the wettest month"]
    assert {r["model"] for r in magics.session.model_client.requests} == {"claude-opus-5-5"}


def test_the_magic_records_to_the_ledger(ip, magics):
    verify_cell(ip, "--ledger verified-claims")
    texts = [e.text for e in magics.session.ledger.entries("verified-claims")]
    assert [t.split(": ")[1].split(" (")[0] for t in texts] == OUTCOMES


def test_an_empty_cell_is_an_empty_result(ip, magics):
    view = verify_cell(ip, cell="\n")
    assert view.data()["claims"] == [] and view.data()["stats"]["agent_calls"] == 0
    assert magics.session.model_client.requests == []


@pytest.mark.parametrize("line, cell, message", [
    ("", "claim: not a list\n", "YAML list"),
    ("", "- claim: fine\n- quote: no claim here\n", "claim 2"),
    ("", "- claim: ''\n", "claim 1"),
    ("--votes 0", CELL, "at least 1"),
    ("--votes many", CELL, "--votes"),
    ("--refutations 0", CELL, "at least 1"),
    ("--concurrency -2", CELL, "at least 1"),
    ("--timeout -1", CELL, "more than 0 seconds"),
    ("--timeout 0", CELL, "more than 0 seconds"),
    ("--max-claims 0", CELL, "at least 1"),
    ("--voter bogus", CELL, "bogus"),
    ("--voter script:no-such-skill:scripts/x.py", CELL, "no-such-skill"),
    ("--no-such-option", CELL, "unrecognized"),
])
def test_bad_cells_and_options_are_one_line_usage_errors(ip, magics, line, cell, message):
    with pytest.raises(UsageError) as raised:
        verify_cell(ip, line, cell)
    text = str(raised.value)
    assert message in text
    assert "\n" not in text, text
    assert magics.session.model_client.requests == []  # nothing was spent
    assert [c["outcome"] for c in verify_cell(ip).data()["claims"]] == OUTCOMES  # and the magic keeps working


def test_a_cell_that_is_not_yaml_is_a_usage_error_and_nothing_is_spent(ip, magics):
    with pytest.raises(UsageError, match="the cell is not YAML"):
        verify_cell(ip, cell="- claim: ok\n- just: [a, b\n")
    assert magics.session.model_client.requests == []


def test_a_cell_that_is_not_yaml_is_a_one_line_usage_error(ip, magics):
    with pytest.raises(UsageError) as raised:
        verify_cell(ip, cell="- claim: ok\n- [unclosed\n")
    assert "not YAML" in str(raised.value)
    assert "\n" not in str(raised.value), str(raised.value)


def test_a_bad_ledger_slug_is_refused_before_any_vote(ip, magics):
    with pytest.raises(UsageError, match="not a plan name"):
        verify_cell(ip, "--ledger 'Bad Slug'")
    assert magics.session.model_client.requests == []


def test_the_usage_without_verify_or_run_names_both(ip, magics):
    with pytest.raises(UsageError) as raised:
        ip.run_cell_magic("skill", "check", CELL)
    assert "%%skill verify" in str(raised.value) and "%%skill run" in str(raised.value)


class Shown(list):
    """What the magic displayed, with each widget's HTML at the moment it was displayed."""

    def __init__(self):
        super().__init__()
        self.html_when_shown: list[str] = []

    def __call__(self, *objects, **kwargs):
        for o in objects:
            self.append(o)
            self.html_when_shown.append(getattr(getattr(o, "html", None), "value", ""))


@pytest.fixture
def shown(monkeypatch):
    captured = Shown()
    monkeypatch.setattr("IPython.display.display", captured)
    return captured


def test_with_a_kernel_a_vote_board_is_shown_and_ends_with_the_same_outcomes(ip, magics, monkeypatch, shown):
    from skills_magic.notebook.widgets import VoteBoard

    monkeypatch.setattr(ip, "kernel", types.SimpleNamespace(_allow_stdin=False), raising=False)
    updates: list[str] = []
    original = VoteBoard.update

    def spying_update(self, claim, vote):
        original(self, claim, vote)
        updates.append(self.html.value)

    monkeypatch.setattr(VoteBoard, "update", spying_update)
    view = verify_cell(ip)
    boards = [o for o in shown if isinstance(o, VoteBoard)]
    assert len(boards) == 1 and len(shown) == 1
    board = boards[0]
    final = board.html.value
    assert re.findall(r"data-outcome='(\w+)'", final) == [c["outcome"] for c in view.data()["claims"]] == OUTCOMES
    assert re.findall(r"data-status='(\w+)'", final) == [x.status for x in view.result.votes]
    assert view.summary() in final and "verifying" not in final
    first = shown.html_when_shown[0]  # before any vote: every seat pending
    assert "verifying" in first and set(re.findall(r"data-status='(\w+)'", first)) == {"pending"}
    assert re.findall(r"data-outcome='(\w+)'", first) == ["pending"] * 3
    assert len(updates) == 9  # every vote, once, as it landed
    assert [re.search(r"(\d) of 9 votes in", u).group(1) for u in updates] == [str(n) for n in range(1, 10)]
    for update in updates:  # a claim's outcome shows only once all its votes are in
        for row in re.findall(r"<tr data-claim='\d'>.*?</tr>", update):
            done = "pending" not in re.findall(r"data-status='(\w+)'", row)
            assert (re.search(r"data-outcome='(\w+)'", row).group(1) != "pending") == done
    assert board.claims == view.result.claims  # the board shows the live votes
    bundle = board._repr_mimebundle_()
    assert bundle is not None


def test_with_a_kernel_and_more_claims_than_the_limit_the_board_has_only_the_verified_rows(ip, magics, monkeypatch, shown):
    from skills_magic.notebook.widgets import VoteBoard

    monkeypatch.setattr(ip, "kernel", types.SimpleNamespace(_allow_stdin=False), raising=False)
    view = verify_cell(ip, "--max-claims 2")
    (board,) = [o for o in shown if isinstance(o, VoteBoard)]
    assert re.findall(r"data-outcome='(\w+)'", board.html.value) == ["confirmed", "refuted"]
    assert "1 more not verified" in board.html.value and view.data()["stats"]["not_verified"] == 1


def test_in_a_plain_shell_no_board_is_created(ip, magics, monkeypatch, shown):
    import skills_magic.notebook.widgets

    created = []

    class Spy:
        def __init__(self, *args, **kwargs):
            created.append(args)

    assert getattr(ip, "kernel", None) is None
    monkeypatch.setattr(skills_magic.notebook.widgets, "VoteBoard", Spy)
    view = verify_cell(ip)
    assert created == [] and shown == []
    assert [c["outcome"] for c in view.data()["claims"]] == OUTCOMES


def test_with_a_kernel_an_empty_cell_shows_no_board(ip, magics, monkeypatch, shown):
    monkeypatch.setattr(ip, "kernel", types.SimpleNamespace(_allow_stdin=False), raising=False)
    view = verify_cell(ip, cell="[]")
    assert shown == [] and view.data()["claims"] == []


@pytest.mark.parametrize("line", ["--voter bogus", "--voter model"])
def test_with_a_kernel_a_refused_run_leaves_no_board_saying_verifying(ip, magics, monkeypatch, shown, line):
    monkeypatch.setattr(ip, "kernel", types.SimpleNamespace(_allow_stdin=False), raising=False)
    if line == "--voter model":
        ip.run_line_magic("skills", "model auto")  # no ANTHROPIC_API_KEY: NoModelConfigured
    with pytest.raises(UsageError):
        verify_cell(ip, line)
    assert all("verifying" not in getattr(getattr(o, "html", None), "value", "") for o in shown)
