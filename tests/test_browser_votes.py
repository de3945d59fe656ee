"""Real browser, real JupyterLab: `%%skill verify` shows a live vote board that fills in while the cell runs.

The same setup as test_browser.py (its helpers are copied here, so the two files can change independently):
JupyterLab runs as a subprocess on 127.0.0.1 (random port and token, its own config/runtime/data folders under
tmp_path); headless Debian Chromium, driven by Playwright's sync API (no browser download, no network), opens a
notebook that loads the extension, picks a scripted model and verifies four claims with `--concurrency 4`.

The scripted model answers each of the 12 votes by its `when` ("voter K of 3" and words of the claim) after a `delay`
of 1-4 s, so the votes land over a few seconds and in a known mix: claim 1 confirmed (3 upheld), claim 2 refuted
(2 refuted, 1 upheld), claim 3 unverified (a text answer and an invalid verdict abstain, 1 upheld), claim 4 confirmed
with one refutation. While the cell runs the test watches the board's DOM (a MutationObserver's log, and a bounded
loop of `wait_for_function` that waits for each change) and checks that the number of decided votes went up through
intermediate values, never down; at the end it checks every cell's status, colour and tooltip, each claim's outcome
and the summary, against the static VotesView (the cell's result) and its JSON data. Screenshots mid-run and at the
end go to test-artifacts/browser/ (votes-1-mid-run.png, votes-2-final.png).

Skips (with the reason) when Chromium, playwright or jupyterlab is missing; CI sets SKILLS_MAGIC_STRICT_SKIPS=1,
which turns those skips into failures.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from jupyterlab_browser import (  # noqa: F401 (fixtures are found by name)
    ARTIFACTS, MISSING, NOTEBOOK, REPO, WAIT_MS, Lab, _shot, browser, cells, lab, open_notebook, page, run_all_cells,
    save_notebook, screenshot_on_failure,
)


pytestmark = pytest.mark.skipif(bool(MISSING), reason="; ".join(MISSING) or "nothing is missing")


# ---------------------------------------------------------------------------------------------- the claims, the votes

# (distinctive words, only in this claim's text, that a turn's `when` matches; the claim; its quote; its source)
CLAIMS = [
    ("Photosynthesis releases oxygen", "Photosynthesis releases oxygen as a by-product.",
     "During the light reactions plants split water and give off O2.", "Campbell Biology, 12th edition"),
    ("visible from the Moon", "The Great Wall of China is visible from the Moon with the naked eye.",
     "A trivia book lists the wall as the only human structure seen from space.", "a trivia book"),
    ("Espresso contains more caffeine", "Espresso contains more caffeine per serving than a mug of drip coffee.",
     "Espresso is the strongest coffee.", "a cafe menu"),
    ("boils at 100 degrees", "Water boils at 100 degrees Celsius at sea-level pressure.",
     "At 101.325 kPa the boiling point of pure water is 99.97 C.", "CRC Handbook of Chemistry and Physics"),
]

# claim number (1-based), voter, delay in seconds, how the voter answers, and the status the board must show.
# "upheld"/"refuted": a valid verdict through the tool; "text": a text answer; "invalid": a verdict that fails the schema
VOTES = [
    (1, 1, 1.0, "upheld", "The quote describes oxygen given off by the light reactions, from a standard textbook."),
    (1, 2, 2.5, "upheld", "Textbook-level fact, current, and the quote states it directly."),
    (1, 3, 3.5, "upheld", "Oxygen from split water is exactly what the quote says."),
    (2, 1, 1.5, "refuted", "Apollo astronauts reported that no human structure can be made out from the Moon."),
    (2, 2, 3.0, "upheld", "The trivia book says so plainly."),
    (2, 3, 2.0, "refuted", "The wall is a few metres wide: far below what an eye resolves from 384,000 km."),
    (3, 1, 1.2, "text", None),
    (3, 2, 2.8, "invalid", "Probably true for a single shot."),
    (3, 3, 4.0, "upheld", "A menu is weak, but espresso is concentrated."),
    (4, 1, 1.8, "upheld", "The handbook gives 99.97 C at one atmosphere, which rounds to 100."),
    (4, 2, 3.2, "refuted", "99.97 is not 100: the claim overstates the precision of the quote."),
    (4, 3, 2.2, "upheld", "A reference handbook, and the rounding is conventional."),
]
STATUS = {"upheld": "upheld", "refuted": "refuted", "text": "abstained", "invalid": "abstained"}
OUTCOMES = {1: "confirmed", 2: "refuted", 3: "unverified", 4: "confirmed"}
from skills_magic.models.anthropic import DEFAULT_MODEL  # noqa: E402
from skills_magic.models.prices import cost_of  # noqa: E402
from skills_magic.runs.budget import dollars  # noqa: E402

USAGE = {"input_tokens": 412, "output_tokens": 57}  # per vote, as a real API would report it
# issue 17: the summary ends with what the votes cost at the price table (the scripted model asks for the default id)
SPENT = cost_of(DEFAULT_MODEL, {"input_tokens": 12 * USAGE["input_tokens"], "output_tokens": 12 * USAGE["output_tokens"]})
SUMMARY = ("2 confirmed, 1 refuted, 1 unverified of 4 claims; "
           f"12 agent calls, {12 * USAGE['input_tokens']:,} input / {12 * USAGE['output_tokens']:,} output tokens, "
           f"cost {dollars(SPENT)}")
TEXT_ANSWER = "This sounds plausible, but I would rather not commit to a verdict."
ABSTAIN_REASON = {"text": "answered in text instead of the verdict tool",
                  "invalid": "invalid verdict: confidence Input should be 'high', 'medium' or 'low'"}
# display.VOTE_COLOUR / OUTCOME_COLOUR, as the browser computes them (rgb)
VOTE_RGB = {"pending": "rgb(224, 224, 224)", "upheld": "rgb(183, 225, 176)", "refuted": "rgb(243, 176, 174)",
            "abstained": "rgb(208, 208, 208)"}
OUTCOME_RGB = {"confirmed": "rgb(46, 125, 50)", "refuted": "rgb(198, 40, 40)", "unverified": "rgb(239, 108, 0)"}


def _turn(claim: int, voter: int, delay: float, answer: str, evidence: str | None) -> dict:
    turn = {"when": [f"voter {voter} of 3", CLAIMS[claim - 1][0]], "delay": delay, "usage": dict(USAGE)}
    if answer == "text":
        turn["text"] = TEXT_ANSWER
    else:
        verdict = {"refuted": answer == "refuted", "evidence": evidence,
                   "confidence": "certain" if answer == "invalid" else "high"}
        turn["tool_use"] = [{"name": "record_verdict", "input": verdict}]
    return turn


def _tooltip(voter: int, answer: str, evidence: str | None) -> str:
    """display.vote_title of the vote the turn makes."""
    if answer in ABSTAIN_REASON:
        return f"voter {voter} (model): {ABSTAIN_REASON[answer]}"
    return f"voter {voter} (model), high confidence: {evidence}"


# ---------------------------------------------------------------------------------------------------- the server


# --------------------------------------------------------------------------------------------------- the browser


# ------------------------------------------------------------------------------------------------- the notebook


def _claims_yaml() -> str:
    import yaml

    return yaml.safe_dump([{"claim": claim, "quote": quote, "source": source} for _, claim, quote, source in CLAIMS],
                          sort_keys=False, allow_unicode=True, width=1000)


def write_notebook(lab: Lab, name: str) -> str:
    """A folder of its own: the scripted turns and the notebook (its path relative to the server's root)."""
    import yaml

    folder = lab.root / name
    folder.mkdir()
    turns = [_turn(*vote) for vote in VOTES]
    (folder / "turns.yaml").write_text(yaml.safe_dump({"turns": turns}, sort_keys=False, allow_unicode=True),
                                       encoding="utf-8")
    setup = ("%env SKILLS_MAGIC_SOURCES=bundled\n"
             "%env SKILLS_MAGIC_DB=.skills/test.sqlite\n"
             "%load_ext skills_magic\n"
             "%skills model scripted turns.yaml")
    result = ("import json\n"
              "votes_view = _\n"
              "print(json.dumps({'type': type(votes_view).__name__, 'data': votes_view.data(),\n"
              "                  'metadata': votes_view.metadata()}))")
    save_notebook(folder / "votes.ipynb", [setup, "%%skill verify --concurrency 4\n" + _claims_yaml(), result])
    return f"{name}/votes.ipynb"


# ----------------------------------------------------------------------------------------------------- the steps

BOARD = ".widget-html table.skills-magic-votes"  # the live board: an ipywidgets HTML view
STATIC = ".jp-OutputArea-executeResult table.skills-magic-votes"  # the cell's result: the VotesView's HTML


# In the page: the state of the verify cell's board, and a MutationObserver that logs every change of it (the log
# holds every state the DOM went through, the Python loop below only those it happened to see).
BOARD_STATE_JS = """
window.__votesBoardState = (index) => {
  const cell = document.querySelectorAll(%(notebook)s + ' .jp-Cell')[index];
  const board = cell && cell.querySelector(%(board)s);
  const prompt = cell ? cell.querySelector('.jp-InputArea-prompt').textContent.trim() : '';
  if (!board) return {present: false, decided: -1, total: 0, summary: '', prompt};
  const votes = [...board.querySelectorAll('td.vote')];
  const summary = board.parentElement.querySelector('.votes-summary');
  return {present: true, total: votes.length, prompt,
          decided: votes.filter(td => td.dataset.status !== 'pending').length,
          summary: summary ? summary.textContent : ''};
};
"""
OBSERVE_JS = """
(index) => {
  window.__votesLog = [];
  const record = () => {
    const state = window.__votesBoardState(index);
    const log = window.__votesLog;
    const last = log[log.length - 1];
    if (state.present && (!last || last.decided !== state.decided || last.summary !== state.summary))
      log.push({...state, at: performance.now()});
  };
  new MutationObserver(record).observe(document.body, {subtree: true, childList: true, characterData: true});
  record();
}
"""


def board_cells(table) -> list[dict]:
    """Every vote cell of a votes table: claim, voter, status, colours, tooltip, text."""
    return table.evaluate("""table => [...table.querySelectorAll('tbody tr')].flatMap(row =>
        [...row.querySelectorAll('td.vote')].map((td, seat) => ({
            claim: Number(row.dataset.claim), voter: seat + 1, status: td.dataset.status,
            className: td.className, background: getComputedStyle(td).backgroundColor,
            title: td.getAttribute('title'), text: td.textContent.trim()})))""")


def outcomes(table) -> dict[int, dict]:
    return {row["claim"]: row for row in table.evaluate("""table => [...table.querySelectorAll('tbody tr')].map(row => {
        const cell = row.querySelector('td.outcome');
        return {claim: Number(row.dataset.claim), outcome: cell.dataset.outcome, text: cell.textContent.trim(),
                colour: getComputedStyle(cell).color, claimText: row.children[1].textContent.trim()};
    })""")}


# ----------------------------------------------------------------------------------------------------- the test

def test_vote_board_fills_in_live_and_matches_the_result(lab, page):
    from playwright.sync_api import expect

    notebook = write_notebook(lab, "votes")
    with screenshot_on_failure(page, "votes", lab):
        open_notebook(page, lab, notebook)
        page.evaluate(BOARD_STATE_JS % {"notebook": json.dumps(NOTEBOOK), "board": json.dumps(BOARD)})
        page.evaluate(OBSERVE_JS, 1)
        run_all_cells(page)
        verify_cell = cells(page).nth(1)
        output = verify_cell.locator(".jp-OutputArea")

        # the board appears (all 12 seats) while the cell still runs
        board = output.locator(BOARD)
        expect(board).to_be_visible(timeout=WAIT_MS)
        expect(board.locator("td.vote")).to_have_count(12)

        # watch it: wait for each change of the number of decided votes (bounded), until the final summary is in
        seen: list[tuple[int, str, str]] = []  # (decided, summary, the cell's prompt) as the Python side saw them
        mid_run_shot = None
        deadline = time.monotonic() + WAIT_MS / 1000
        while True:
            state = page.evaluate("window.__votesBoardState(1)")
            if not seen or (state["decided"], state["summary"]) != seen[-1][:2]:
                seen.append((state["decided"], state["summary"], state["prompt"]))
            if mid_run_shot is None and 0 < state["decided"] < 12:
                board.scroll_into_view_if_needed()
                mid_run_shot = _shot(page, "votes-1-mid-run")
            if state["summary"] == SUMMARY:
                break
            remaining_ms = (deadline - time.monotonic()) * 1000
            assert remaining_ms > 0, f"the board did not finish within {WAIT_MS / 1000:.0f} s: {seen}"
            # the next change of the board (no fixed sleep: returns as soon as the DOM differs)
            page.wait_for_function(
                "([decided, summary]) => { const s = window.__votesBoardState(1);"
                " return s.decided !== decided || s.summary !== summary; }",
                arg=[state["decided"], state["summary"]], timeout=remaining_ms)
        log = page.evaluate("window.__votesLog")
        print("board states the loop saw:", [(n, summary) for n, summary, _ in seen])
        print("board states the observer logged:", [(e["decided"], round(e["at"] - log[0]["at"])) for e in log])

        counts = [decided for decided, _, _ in seen]
        logged = [entry["decided"] for entry in log]
        assert mid_run_shot is not None, f"no intermediate state was seen: {seen}"
        assert any(0 < n < 12 for n in counts), f"the board only showed its start and its end: {seen}"
        assert counts == sorted(counts) and counts[-1] == 12, f"the decided votes went down: {counts}"
        assert logged == sorted(logged) and logged[-1] == 12, f"the decided votes went down: {logged}"
        assert len({n for n in logged if 0 < n < 12}) >= 3, f"the votes did not arrive over time: {log}"
        # while votes were coming in, the summary counted them and the cell was still running
        live = [(n, summary, prompt) for n, summary, prompt in seen if 0 < n < 12]
        assert all(summary == f"{n} of 12 votes in" for n, summary, _ in live), live
        assert all(prompt == "[*]:" for _, _, prompt in live), f"the cell had finished already: {live}"
        arrival_ms = [entry["at"] for entry in log if 0 < entry["decided"] <= 12]
        assert arrival_ms[-1] - arrival_ms[0] > 2000, f"the votes arrived all at once: {log}"

        # the cell's result (the static VotesView) and the JSON cell after it
        static = output.locator(STATIC)
        expect(static).to_be_visible(timeout=WAIT_MS)
        expect(verify_cell.locator(".jp-InputArea-prompt")).to_have_text(re.compile(r"\[\d+\]:"))
        json_output = cells(page).nth(2).locator(".jp-OutputArea-output", has_text='"type": "VotesView"')
        expect(json_output).to_be_visible(timeout=WAIT_MS)
        board.scroll_into_view_if_needed()
        final_shot = _shot(page, "votes-2-final")
        reported = json.loads(json_output.text_content())

        # every cell of the board: status, colour, mark, tooltip; the static table says the same
        expected = {(claim, voter): (STATUS[answer], _tooltip(voter, answer, evidence))
                    for claim, voter, _, answer, evidence in VOTES}
        live_cells, static_cells = board_cells(board), board_cells(static)
        assert len(live_cells) == 12, live_cells
        for cell in live_cells:
            status, tooltip = expected[cell["claim"], cell["voter"]]
            assert cell["status"] == status, cell
            assert cell["className"] == f"vote vote-{status}", cell
            assert cell["background"] == VOTE_RGB[status], cell
            assert cell["text"].endswith(status), cell
            assert cell["title"] == tooltip, cell
        assert live_cells == static_cells
        refuted = next(c for c in live_cells if (c["claim"], c["voter"]) == (2, 1))
        assert refuted["status"] == "refuted" and "no human structure can be made out from the Moon" in refuted["title"]

        # each claim's outcome, colour, and text, on the board, in the static table, and in the result's data
        board_outcomes, static_outcomes = outcomes(board), outcomes(static)
        for number, outcome in OUTCOMES.items():
            row = board_outcomes[number]
            assert (row["outcome"], row["text"], row["colour"]) == (outcome, outcome, OUTCOME_RGB[outcome]), row
            assert row["claimText"] == CLAIMS[number - 1][1], row
        assert board_outcomes == static_outcomes
        assert reported["type"] == "VotesView", reported
        data = reported["data"]
        assert {i + 1: c["outcome"] for i, c in enumerate(data["claims"])} == OUTCOMES, data
        for i, claim in enumerate(data["claims"]):
            assert claim["claim"]["claim"] == CLAIMS[i][1]
            statuses = [(v["voter"], v["status"]) for v in claim["votes"]]
            assert statuses == [(voter, STATUS[answer]) for c, voter, _, answer, _ in VOTES if c == i + 1], statuses
            for vote in claim["votes"]:
                if vote["status"] == "abstained":
                    assert vote.get("reason") in ABSTAIN_REASON.values(), vote
                else:
                    assert vote["evidence"] in expected[i + 1, vote["voter"]][1], vote
        assert data["stats"] == {"claims": 4, "confirmed": 2, "refuted": 1, "unverified": 1, "not_verified": 0,
                                 "agent_calls": 12, "input_tokens": 12 * USAGE["input_tokens"],
                                 "output_tokens": 12 * USAGE["output_tokens"]}, data["stats"]
        assert data["cancelled"] is False

        # the summary: the board's final line, the static table's, and the one the result computes
        expect(output.locator(".widget-html .votes-summary")).to_have_text(SUMMARY)
        expect(output.locator(".jp-OutputArea-executeResult .votes-summary")).to_have_text(SUMMARY)

        # the delays were honoured, and the votes ran concurrently (4 at a time, not one after another)
        delays = [delay for _, _, delay, _, _ in VOTES]
        seconds = reported["metadata"]["vote_seconds"]
        assert all(s >= d - 0.05 for s, d in zip(seconds, delays)), (seconds, delays)
        assert reported["metadata"]["seconds"] < sum(delays) / 2, reported["metadata"]
        assert mid_run_shot.stat().st_size > 0 and final_shot.stat().st_size > 0
