"""Real browser, real JupyterLab: `%%skill research` shows a live board of its stages that fills in while the cell
runs, and the report it returns ends with the same board.

The setup is tests/jupyterlab_browser.py's (JupyterLab on 127.0.0.1, headless Debian Chromium through Playwright).
The notebook picks a scripted model whose agents answer each stage after a `delay`, so the stages fill in over a few
seconds: 1 scope, 2 searches, 4 fetches, 4 claims x 3 votes, 1 synthesis (the formula: 1 + 2 + 4 + 4 x 3 + 1 = 20).
While the cell runs the test reads the board's rows from the DOM (a MutationObserver's log of every state): the
agents done only go up, through intermediate values, the stages appear in the workflow's order, and verification
starts only once every fetch is done (the barrier, seen from the page). At the end the live board, the report's
static board and the report's data agree. Screenshots go to test-artifacts/browser/ (research-1-mid-run.png,
research-2-final.png).

Skips (with the reason) when Chromium, playwright or jupyterlab is missing; CI sets SKILLS_MAGIC_STRICT_SKIPS=1,
which turns those skips into failures.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from jupyterlab_browser import (  # noqa: F401 (fixtures are found by name)
    MISSING, NOTEBOOK, WAIT_MS, Lab, _shot, browser, cells, lab, open_notebook, page, run_all_cells, save_notebook,
    screenshot_on_failure,
)

pytestmark = pytest.mark.skipif(bool(MISSING), reason="; ".join(MISSING) or "nothing is missing")

USAGE = {"input_tokens": 800, "output_tokens": 90}
SOURCES = {"temperature": ["https://a.example/roofs", "https://b.example/meta"],
           "energy": ["https://c.example/vendor", "https://d.example/review"]}
CLAIMS = {"https://a.example/roofs": "Roof surfaces were 20 C cooler", "https://b.example/meta": "Air cooled by 0.3 C",
          "https://c.example/vendor": "Energy use fell by 75%", "https://d.example/review": "Cooling savings were 2-16%"}
STAGES = ["scope", "search", "fetch", "verify", "synthesise"]


def _turn(when: list[str], tool: str, answer: dict, delay: float) -> dict:
    return {"when": when, "delay": delay, "usage": dict(USAGE), "tool_use": [{"name": tool, "input": answer}]}


def research_turns() -> list[dict]:
    turns = [_turn(["Research scoper"], "record_scope", {
        "question": "Do green roofs cool cities?", "underspecified": False,
        "angles": [{"angle": angle, "query": f"green roofs {angle}"} for angle in SOURCES]}, 1.0)]
    for number, (angle, urls) in enumerate(SOURCES.items()):
        turns.append(_turn(["Source finder", f"**Angle:** {angle}"], "record_search",
                           {"sources": [{"url": u, "title": u.split("/")[2]} for u in urls]}, 1.0 + number))
    for number, (url, claim) in enumerate(CLAIMS.items()):
        turns.append(_turn(["Claim extractor", url], "record_fetch",
                           {"claims": [{"claim": claim, "quote": f"{claim}, says the page", "importance": 4 - number}]},
                           0.8 + 0.4 * number))
    for number, claim in enumerate(CLAIMS.values()):
        for seat in (1, 2, 3):
            refuted = "75%" in claim
            turns.append(_turn([f"voter {seat} of 3", claim], "record_verdict",
                               {"refuted": refuted, "evidence": "measured" if not refuted else "a vendor's figure",
                                "confidence": "high"}, 0.4 + 0.3 * seat + 0.2 * number))
    turns.append(_turn(["Research synthesiser"], "record_synthesise", {
        "executive_summary": "Roofs cool their surface, the air a little.", "findings": [{"finding": "Surfaces", "claims": [1]}],
        "caveats": [], "open_questions": []}, 1.0))
    return turns


def write_notebook(lab: Lab, name: str) -> str:
    import yaml

    folder = lab.root / name
    folder.mkdir()
    (folder / "turns.yaml").write_text(yaml.safe_dump({"turns": research_turns()}, sort_keys=False), encoding="utf-8")
    setup = ("%env SKILLS_MAGIC_SOURCES=bundled\n%env SKILLS_MAGIC_DB=.skills/test.sqlite\n%load_ext skills_magic\n"
             "%skills model scripted turns.yaml")
    result = ("import json\nreport = _.report\n"
              "print(json.dumps({'board': report.board.stages, 'agent_calls': report.agent_calls,"
              " 'formula': report.formula, 'status': report.status}))")
    save_notebook(folder / "research.ipynb", [setup, "%%skill research --model claude-sonnet-5-5\nDo green roofs cool cities?",
                                              result])
    return f"{name}/research.ipynb"


LIVE = ".widget-html table.skills-magic-board"  # the live board: an ipywidgets HTML view
STATIC = ".jp-OutputArea-executeResult table.skills-magic-board"  # the report's final board

BOARD_STATE_JS = """
window.__researchBoard = (index) => {
  const cell = document.querySelectorAll(%(notebook)s + ' .jp-Cell')[index];
  const board = cell && cell.querySelector(%(board)s);
  const prompt = cell ? cell.querySelector('.jp-InputArea-prompt').textContent.trim() : '';
  if (!board) return {present: false, done: -1, stages: [], prompt};
  const rows = [...board.querySelectorAll('tbody tr')].map(tr => ({
      stage: tr.dataset.stage, done: Number(tr.dataset.done), abstained: Number(tr.dataset.abstained),
      started: Number(tr.children[1].textContent)}));
  return {present: true, prompt, stages: rows, done: rows.reduce((n, r) => n + r.done + r.abstained, 0)};
};
"""
OBSERVE_JS = """
(index) => {
  window.__researchLog = [];
  const record = () => {
    const state = window.__researchBoard(index);
    const log = window.__researchLog;
    const last = log[log.length - 1];
    if (state.present && (!last || JSON.stringify(last.stages) !== JSON.stringify(state.stages)))
      log.push({...state, at: performance.now()});
  };
  new MutationObserver(record).observe(document.body, {subtree: true, childList: true, characterData: true});
  record();
}
"""


def test_the_research_board_fills_in_live_stage_by_stage_and_matches_the_report(lab, page):
    from playwright.sync_api import expect

    notebook = write_notebook(lab, "research")
    with screenshot_on_failure(page, "research", lab):
        open_notebook(page, lab, notebook)
        page.evaluate(BOARD_STATE_JS % {"notebook": json.dumps(NOTEBOOK), "board": json.dumps(LIVE)})
        page.evaluate(OBSERVE_JS, 1)
        run_all_cells(page)
        research_cell = cells(page).nth(1)
        output = research_cell.locator(".jp-OutputArea")
        board = output.locator(LIVE)
        expect(board).to_be_visible(timeout=WAIT_MS)

        seen, mid_run_shot = [], None
        deadline = time.monotonic() + WAIT_MS / 1000
        while True:
            state = page.evaluate("window.__researchBoard(1)")
            if not seen or state["done"] != seen[-1]["done"]:
                seen.append(state)
            if mid_run_shot is None and 0 < state["done"] < 20 and state["prompt"] == "[*]:":
                board.scroll_into_view_if_needed()
                mid_run_shot = _shot(page, "research-1-mid-run")
            if state["done"] == 20 and output.locator(STATIC).count():
                break
            remaining_ms = (deadline - time.monotonic()) * 1000
            assert remaining_ms > 0, f"the board did not finish within {WAIT_MS / 1000:.0f} s: {seen}"
            page.wait_for_function("(done) => window.__researchBoard(1).done !== done || "
                                   "document.querySelector(" + json.dumps(NOTEBOOK + " " + STATIC) + ") !== null",
                                   arg=state["done"], timeout=remaining_ms)
        log = page.evaluate("window.__researchLog")
        print("board states:", [(e["done"], round(e["at"] - log[0]["at"])) for e in log])

        done = [entry["done"] for entry in log]
        assert mid_run_shot is not None, f"no intermediate state was seen while the cell ran: {seen}"
        assert done == sorted(done) and done[-1] == 20, f"the agents done went down: {done}"
        assert len({n for n in done if 0 < n < 20}) >= 5, f"the stages did not fill in over time: {done}"
        assert log[-1]["at"] - log[0]["at"] > 2000, f"everything arrived at once: {log}"
        # the stages appear in the workflow's order, and no vote starts before every fetch is done: the barrier
        order = [row["stage"] for row in log[-1]["stages"]]
        assert order == STAGES, order
        for entry in log:
            rows = {row["stage"]: row for row in entry["stages"]}
            if rows.get("verify", {}).get("started"):
                assert rows["fetch"]["done"] == 4, entry

        # the report's board, its data, and the live board agree
        static = output.locator(STATIC)
        expect(static).to_be_visible(timeout=WAIT_MS)
        expect(research_cell.locator(".jp-InputArea-prompt")).to_have_text(re.compile(r"\[\d+\]:"))
        json_output = cells(page).nth(2).locator(".jp-OutputArea-output", has_text='"formula"')
        expect(json_output).to_be_visible(timeout=WAIT_MS)
        reported = json.loads(json_output.text_content())
        assert reported["formula"] == "1 + 2 + 4 + 4 × 3 + 1 = 20" and reported["agent_calls"] == 20, reported
        assert reported["status"] == "complete", reported
        live_rows = page.evaluate("window.__researchBoard(1)")["stages"]
        assert {row["stage"]: row["done"] + row["abstained"] for row in live_rows} == {
            stage: counts["done"] + counts["abstained"] for stage, counts in reported["board"].items()}
        expect(output.locator(".widget-html .board-summary")).to_contain_text("confirmed")
        board.scroll_into_view_if_needed()
        assert _shot(page, "research-2-final").stat().st_size > 0 and mid_run_shot.stat().st_size > 0
