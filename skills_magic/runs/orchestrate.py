"""Orchestration primitives: typed agent stages, run one per item in `parallel`, or chained in a `pipeline`.

A `Stage` is one agent call per item: a prompt function, a pydantic schema, and a request that offers ONE tool
whose input schema is the schema's and forces it (`tool_choice`), so one agent's output is the next one's typed
input. A malformed answer (no tool call, an input the schema rejects) is retried once, with the problem told to the
model; a second one, a model error or a cost cap reached is an `Abstention`, a value, never an exception.

An `Orchestra` holds what every call shares: the client, one concurrency limit (a semaphore), the `Budget` checked
before each call and settled after it, the run log (one "vote"-kind row per call: its columns are a call's model,
usage, cost, outcome and exchange) and `on_event(kind, data)` for a live board. `pipeline(items, s1, s2)` moves each
item on to s2 as soon as its s1 is done; `BARRIER` between stages holds everything until every item has left the
stages before it (a claim pool must be complete before it is ranked). Results come back in input order.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from skills_magic.models.base import ModelError, capabilities, for_new_loop, usage_of
from skills_magic.models.prices import cost_of
from skills_magic.runs.budget import Budget, CapReached

STAGE_MAX_TOKENS = 2048  # one structured answer: a list of angles, claims with quotes, a verdict
CONCURRENCY = 8  # agent calls in flight at once, across every stage: well under the API's rate limits
ATTEMPTS = 2  # the first answer, and one retry told what was wrong with it
TOOL_PREFIX = "record_"  # a stage's tool is record_<stage name>, as verification's is record_verdict

In = TypeVar("In")
Out = TypeVar("Out", bound=BaseModel)


@dataclass(frozen=True)
class Abstention:
    """A stage that gave no usable answer for an item: the item does not flow on, and the reason says why."""

    stage: str
    item: Any
    reason: str


class _Barrier:
    def __repr__(self) -> str:
        return "BARRIER"


BARRIER = _Barrier()  # pipeline(items, s1, BARRIER, s2): nothing enters s2 until every item has left s1


class _Malformed(Exception):
    """An answer that is not the stage's schema; the message is what the model is told on its retry."""


class _Branches(list):
    """The results of a fan-out (a stage's `fan_out` gave several values), told apart from an item that is a list."""


@dataclass
class Stage(Generic[In, Out]):
    """One agent call per item: `prompt(item)` is the user turn, the answer is validated with `schema`; `fan_out`
    (optional) turns the answer into the values that flow on, each on its own (search angles -> their sources)."""

    name: str
    prompt: Callable[[In], str]
    schema: type[Out]
    system: str = ""
    max_tokens: int = STAGE_MAX_TOKENS
    fan_out: Callable[[Out], Iterable[Any]] | None = None

    @property
    def tool_name(self) -> str:
        return (TOOL_PREFIX + re.sub(r"[^A-Za-z0-9_-]", "_", self.name))[:64]

    def request(self, model_id: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        tool = {"name": self.tool_name, "description": f"Record your answer for {self.name}.",
                "input_schema": self.schema.model_json_schema()}
        request: dict[str, Any] = {"model": model_id, "max_tokens": self.max_tokens, "messages": messages,
                                   "tools": [tool], "tool_choice": {"type": "tool", "name": self.tool_name}}
        if self.system:
            request["system"] = self.system
        return request

    def read(self, response: dict[str, Any]) -> Out:
        """The answer as a schema instance; _Malformed saying what is wrong with it."""
        calls = [b for b in response.get("content") or [] if b.get("type") == "tool_use" and b.get("name") == self.tool_name]
        if not calls:
            raise _Malformed(f"there was no call to {self.tool_name}: answer only by calling it")
        try:
            return self.schema.model_validate(calls[0].get("input"))
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, p['loc'])) or 'input'}: {p['msg']}" for p in error.errors()[:5])
            raise _Malformed(f"the input of {self.tool_name} is invalid ({problems}): call it again with a valid input") from None


def retry_turns(response: dict[str, Any], problem: str) -> list[dict[str, Any]]:
    """The assistant's malformed answer and the user's reply telling it what was wrong (a tool_result to a call)."""
    content = [b for b in response.get("content") or [] if b.get("type") in ("text", "tool_use")]
    calls = [b for b in content if b.get("type") == "tool_use"]
    reply: list[dict[str, Any]] = [{"type": "tool_result", "tool_use_id": c["id"], "is_error": True, "content": problem}
                                   for c in calls] or [{"type": "text", "text": problem}]
    return [{"role": "assistant", "content": content or [{"type": "text", "text": "(no answer)"}]},
            {"role": "user", "content": reply}]


Step = Stage | Callable[[Any], Awaitable[Any]]  # a plain async function: nested parallel(), its calls shared too


@dataclass
class Orchestra:
    """The calls of one orchestration: a shared concurrency limit, cost cap, run log and event hook."""

    client: Any
    model_id: str
    limit: int = CONCURRENCY
    budget: Budget | None = None
    run_log: Any = None
    on_event: Callable[[str, dict[str, Any]], None] | None = None
    calls: int = 0  # agent calls made (retries included; a call the cap refused is not one)
    usage: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"), 0))
    cost_usd: float = 0.0
    _loop: Any = field(default=None, repr=False)
    _semaphore: Any = field(default=None, repr=False)
    _loop_client: Any = field(default=None, repr=False)

    def _here(self) -> tuple[asyncio.Semaphore, Any]:
        """The semaphore and client of the running loop (both belong to the loop that first uses them)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop, self._semaphore = loop, asyncio.Semaphore(self.limit)
            self._loop_client = for_new_loop(self.client)
        return self._semaphore, self._loop_client

    def _emit(self, kind: str, data: dict[str, Any]) -> None:
        if self.on_event is not None:
            self.on_event(kind, data)

    async def parallel(self, items: Iterable[Any], stage: Step) -> list[Any]:
        """Each item through `stage` at once (under the shared limit); the results in input order."""
        return list(await asyncio.gather(*(self._step(stage, item, str(i)) for i, item in enumerate(items))))

    async def pipeline(self, items: Iterable[Any], *stages: Step | _Barrier) -> list[Any]:
        """Each item on to the next stage as soon as its stage is done; at BARRIER every item waits for the rest.
        An item's result is its last stage's (an Abstention where it stopped); a fan-out gives a list of them."""
        segments: list[list[Step]] = [[]]
        for stage in stages:
            segments.append([]) if stage is BARRIER else segments[-1].append(stage)
        trees: list[Any] = list(items)
        for segment in segments:  # a segment is done for every item before the next one starts: the barrier
            trees = list(await asyncio.gather(*(self._grow(tree, segment, str(i)) for i, tree in enumerate(trees))))
        return [_plain(tree) for tree in trees]

    async def _grow(self, tree: Any, stages: Sequence[Step], key: str) -> Any:
        """The leaves of a result tree (a fan-out's branches, or one value) on through `stages`."""
        if isinstance(tree, _Branches):
            return _Branches(await asyncio.gather(*(self._grow(t, stages, f"{key}.{i}") for i, t in enumerate(tree))))
        return await self._flow(tree, stages, key)

    async def _flow(self, value: Any, stages: Sequence[Step], key: str) -> Any:
        if not stages or isinstance(value, Abstention):
            return value
        stage, rest = stages[0], stages[1:]
        answer = await self._step(stage, value, key)
        if isinstance(stage, Stage) and stage.fan_out is not None and not isinstance(answer, Abstention):
            return _Branches(await asyncio.gather(*(self._flow(v, rest, f"{key}.{i}")
                                                    for i, v in enumerate(stage.fan_out(answer)))))
        return await self._flow(answer, rest, key)

    async def _step(self, stage: Step, item: Any, key: str) -> Any:
        if not isinstance(stage, Stage):
            return await stage(item)
        name = stage.name
        self._emit("started", {"stage": name, "item": key})
        answer = await self._ask(stage, item, key)
        self._emit("finished", {"stage": name, "item": key, "result": answer, "abstained": isinstance(answer, Abstention)})
        return answer

    async def _ask(self, stage: Stage, item: Any, key: str) -> Any:
        """The stage's answer for one item, retried once when malformed; an Abstention when there is none."""
        messages: list[dict[str, Any]] = [{"role": "user", "content": stage.prompt(item)}]
        problem = ""
        for attempt in range(1, ATTEMPTS + 1):
            request = stage.request(self.model_id, messages)
            try:
                response, row = await self._call(request, stage.name, key, attempt)
            except (CapReached, ModelError) as error:
                return Abstention(stage.name, item, str(error))
            try:
                answer = stage.read(response)
            except _Malformed as malformed:
                problem = str(malformed)
                self._log(row, "malformed", problem)
                messages = [*messages, *retry_turns(response, problem)]
                continue
            self._log(row, "answered", None)
            return answer
        return Abstention(stage.name, item, f"malformed twice: {problem}")

    async def _call(self, request: dict[str, Any], stage: str, key: str, attempt: int) -> tuple[dict[str, Any], dict]:
        """One agent call under the shared limit and the cap (CapReached: it was not made); its run log fields."""
        semaphore, client = self._here()
        row: dict[str, Any] = {"label": f"stage:{stage}", "model": self.model_id,
                               "harness": capabilities(self.client).harness, "requests": [request],
                               "data": {"stage": stage, "item": key, "attempt": attempt}}
        async with semaphore:
            held = self.budget.reserve(self.model_id, request) if self.budget is not None else 0.0
            started = time.perf_counter()
            try:
                response = await client.acreate(request)
            except ModelError as error:
                if self.budget is not None:
                    self.budget.settle(held, self.model_id, None)
                self._log({**row, "seconds": time.perf_counter() - started}, "error", str(error))
                raise
        usage = usage_of(response)
        self.calls += 1
        for name, count in usage.items():
            self.usage[name] += count
        cost = self.budget.settle(held, self.model_id, usage) if self.budget is not None else cost_of(self.model_id, usage)
        self.cost_usd += cost or 0.0
        return response, {**row, "seconds": time.perf_counter() - started, "usage": usage, "cost_usd": cost,
                          "responses": [response]}

    def _log(self, row: dict[str, Any], outcome: str, error: str | None) -> None:
        """One run log row per agent call (kind "vote": its columns are exactly a call's), when there is a log."""
        if self.run_log is not None:
            self.run_log.record("vote", **row, outcome=outcome, error=error)


def _plain(tree: Any) -> Any:
    return [_plain(t) for t in tree] if isinstance(tree, _Branches) else tree


T = TypeVar("T")


def run(coroutine: Awaitable[T]) -> T:
    """A coroutine's result from synchronous code, also in Jupyter (whose thread already runs a loop: a thread).
    Orchestrations and Claude Code runs both go through it."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)  # type: ignore[arg-type]
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="skills-magic-loop") as pool:
        return pool.submit(asyncio.run, coroutine).result()  # type: ignore[arg-type]


__all__ = ["BARRIER", "Abstention", "Orchestra", "Stage", "run", "retry_turns"]
