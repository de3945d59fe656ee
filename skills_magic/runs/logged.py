"""What a run leaves in the run log (records/runlog.py): the row of a RunResult (`run_fields`, `record_run`), and
`Capture`, a client wrapper that keeps a run's model exchanges in memory, as models/replay.RecordingModel keeps a
cassette's, so the row holds the bodies sent and received.

Bodies stay cheap: each request after the first keeps only the messages it added to the one before
(`earlier_messages` says how many came before), so a long run costs its size once, not once per turn.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from skills_magic.models.base import ModelClient, ObservedClient, Request, Response, capabilities


class Capture(ObservedClient):
    """`inner`, keeping every request it was sent and every response it gave (`requests`, `responses`); every
    other attribute (name, harness, placeholders, a cassette's position) is the inner client's."""

    def __init__(self, inner: ModelClient):
        self.inner = inner
        self.requests: list[Request] = []
        self.responses: list[Response] = []
        self._sent = 0  # messages the kept requests already hold

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (a copy being made): no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _seen(self, request: Request, response: Response) -> None:
        messages = list(request.get("messages") or [])
        earlier = self._sent if len(messages) >= self._sent else 0  # fewer: a new conversation on the same client
        kept = {key: value for key, value in request.items() if key != "messages"}
        kept["messages"] = messages[earlier:]
        if earlier:
            kept["earlier_messages"] = earlier
        self.requests.append(kept)
        self.responses.append(response)
        self._sent = len(messages)


def _tool_call(call) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "input": call.input, "result_bytes": call.result_bytes,
            "is_error": call.is_error, "error": call.error}


def run_fields(result, client: ModelClient, *, batch: bool = False) -> dict[str, Any]:
    """The run log's fields of one RunResult: its cost computed from the price table (the harness's own report
    beside it), its exchanges when `client` is a Capture."""
    from skills_magic.models.prices import cost_of

    return {
        "model": result.model, "harness": capabilities(client).harness, "skill": result.skill,
        "activated": list(result.activated), "tool_calls": [_tool_call(c) for c in result.tool_calls],
        "trace": [e.to_dict() for e in result.trace], "usage": dict(result.usage), "seconds": result.seconds,
        "cost_usd": cost_of(result.model, result.usage, batch=batch), "reported_cost_usd": result.cost_usd,
        "outcome": result.stop_reason, "error": result.error,
        "data": {"task": result.task, "final_text": result.final_text, "client": result.client, "turns": result.turns,
                 "note": result.note, "interrupted": result.interrupted, "run_id": result.run_id,
                 "outputs": [{k: o.get(k) for k in ("script", "path", "bytes")} for o in result.outputs],
                 "forks": [f.skill for f in result.forks]},
        "requests": client.requests if isinstance(client, Capture) else None,
        "responses": client.responses if isinstance(client, Capture) else None,
    }


def record_run(run_log, result, client: ModelClient) -> int | None:
    """One `run` row for a finished run (`run_log` None: nothing is logged)."""
    return None if run_log is None else run_log.record("run", **run_fields(result, client))


def capture(client: ModelClient, run_log) -> ModelClient:
    """`client` in a Capture when `run_log` is logging (its rows then hold the bodies), else `client` itself."""
    return Capture(client) if run_log is not None and run_log.enabled else client


def timed(run: Callable[..., Any], *args: Any) -> Any:
    """`run(*args)`'s RunResult, its `seconds` the wall-clock time it took."""
    started = time.perf_counter()
    result = run(*args)
    result.seconds = time.perf_counter() - started
    return result


def record_eval(run_log, result, client: ModelClient, label: str, item, run: int, strategy: str,
                activated: list[str]) -> int | None:
    """One `eval` row for one run of a prompt (`item`: evals.EvalItem; `activated`: the skills the eval counts),
    labelled with its report's label."""
    if run_log is None:
        return None
    data = {"item": item.id, "run": run, "category": item.category, "expected": list(item.expected),
            "strategy": strategy, "counted": activated, "prompt": item.prompt}
    return run_log.record("eval", **{**run_fields(result, client), "label": label, "data": data})


def batch_fields(model_id: str, label: str, item, run: int, custom_id: str, request: Request,
                 message: Response | None, error: str | None, batch_ids: list[str]) -> dict[str, Any]:
    """The run log's fields of one Message Batches request: its result's tokens at the batch price."""
    from skills_magic.models.base import usage_of
    from skills_magic.models.prices import cost_of

    usage = usage_of(message or {})
    calls = [b for b in (message or {}).get("content") or [] if b.get("type") == "tool_use"]
    return {"model": model_id, "harness": "native", "label": label, "usage": usage,
            "cost_usd": cost_of(model_id, usage, batch=True) if message is not None else None,
            "outcome": (message or {}).get("stop_reason") or "errored", "error": None if message else error or "no result",
            "tool_calls": [{"name": b.get("name"), "input": b.get("input")} for b in calls],
            "data": {"item": item.id, "run": run, "category": item.category, "expected": list(item.expected),
                     "custom_id": custom_id, "batch_ids": list(batch_ids)},
            "requests": [request], "responses": None if message is None else [message]}
