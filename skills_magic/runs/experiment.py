"""The experiment ledger inside runs: the model's `experiment` tool, and a prediction's falsifying check run
through the gate with what happened kept as an observation."""

from __future__ import annotations

from typing import Any

from skills_magic.records.ledger import Ledger
from skills_magic.skills.skill import Skill

LEDGER_METADATA_KEY = "experiment-ledger"  # a skill with `metadata: {experiment-ledger: "true"}` gets the ledger tool
LEDGER_OUTPUT_CHARS = 4000  # a check's output kept in its observation; the rest is cut (and says so)


def asks_for_ledger(skill: Skill | None) -> bool:
    """The explicitly run skill asks for the `experiment` tool in its metadata."""
    return skill is not None and skill.frontmatter.metadata.get(LEDGER_METADATA_KEY, "").lower() == "true"


def experiment_tool(ledger: Ledger, plan: str):
    """(plan, call): the `experiment` tool's handler, writing to `plan` of `ledger`."""

    def call(data: dict[str, Any]):
        action = data.get("action")
        if action == "list":
            state = ledger.state(plan)
            lines = [state.headline] + [e.summary() for e in state.entries]
            return "\n".join(lines), None
        actions = {
            "hypothesis": lambda: ledger.hypothesis(plan, data.get("text")),
            "prediction": lambda: ledger.prediction(plan, data.get("text"), data.get("falsified_by"), data.get("hypothesis")),
            "verdict": lambda: ledger.verdict(plan, str(data.get("prediction", "")), str(data.get("outcome", "")), data.get("evidence")),
            "observation": lambda: ledger.observation(plan, data.get("text"), data.get("prediction")),
            "conclusion": lambda: ledger.conclusion(plan, data.get("text")),
            "skip": lambda: ledger.skip(plan, str(data.get("prediction", "")), data.get("reason")),
        }
        if action not in actions:
            raise ValueError(f"`action` must be one of {', '.join([*actions, 'list'])}")
        entry = actions[action]()
        return f"recorded {entry.plan} {entry.summary()}", entry

    return plan, call


def check_prediction(ledger: Ledger, gate, plan: str, label: str, folder: str, asker):
    """(the gate's outcome, the observation or None): run prediction `label`'s falsifying check through the gate in
    `folder` and record what happened, linked to it. Never writes the verdict."""
    prediction = ledger.prediction_entry(plan, label)
    outcome = gate.run_check("ledger", prediction.falsified_by, folder, asker)
    if outcome.run is None:
        return outcome, None
    run = outcome.run
    status = "timed out" if run.timed_out else f"exit code {run.exit_code}"
    output = (run.stdout + (("\n" + run.stderr) if run.stderr.strip() else "")).strip()
    if len(output) > LEDGER_OUTPUT_CHARS:
        output = output[:LEDGER_OUTPUT_CHARS] + f"\n[output cut at {LEDGER_OUTPUT_CHARS} characters]"
    text = f"ran the falsifying check `{prediction.falsified_by}`: {status}" + (f"\n{output}" if output else "")
    return outcome, ledger.observation(plan, text, prediction.label)
