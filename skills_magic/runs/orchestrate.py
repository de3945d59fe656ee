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

A stage given `web` (models.web_tools.WebTools) may also use the API's server-side web search and fetch: its tool
choice is then `auto` (a forced tool cannot search first), a `pause_turn` is continued (each part one request,
under the cap), and what it cited and consulted is kept in `Orchestra.found[(stage, item)]`. Every call is a line of
`Orchestra.trace` and a run log row; `Board` counts each stage's items as they start and finish, for a live board.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from skills_magic.models.base import ModelError, capabilities, for_new_loop, usage_of
from skills_magic.models import web_tools
from skills_magic.models.prices import cost_of
from skills_magic.runs.budget import Budget, CapReached

STAGE_MAX_TOKENS = 2048  # one structured answer: a list of angles, claims with quotes, a verdict
CONCURRENCY = 8  # agent calls in flight at once, across every stage: well under the API's rate limits
ATTEMPTS = 2  # the first answer, and one retry told what was wrong with it
CALL_TIMEOUT_SECONDS = 300.0  # a request slower than this is given up (an abstention): one stuck agent never hangs a run
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
    fan_out: Callable[[Any], Iterable[Any]] | None = None
    carry: Callable[[In, Out], Any] | None = None  # what flows on from an item and its answer (else the answer)
    web: web_tools.WebTools | None = None  # the API's server-side web search / fetch, offered beside the tool
    tool: str = ""  # the answer tool's name, where it is not record_<name> (voters answer with record_verdict)

    @property
    def tool_name(self) -> str:
        return self.tool or (TOOL_PREFIX + re.sub(r"[^A-Za-z0-9_-]", "_", self.name))[:64]

    def request(self, model_id: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        tool = {"name": self.tool_name, "description": f"Record your answer for {self.name}.",
                "input_schema": self.schema.model_json_schema()}
        request: dict[str, Any] = {"model": model_id, "max_tokens": self.max_tokens, "messages": messages,
                                   "tools": [tool], "tool_choice": {"type": "tool", "name": self.tool_name}}
        if self.system:
            request["system"] = self.system
        return web_tools.offer(request, self.web)

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
    content = list(response.get("content") or [])  # as received: server blocks and thinking go back as they came
    calls = [b for b in content if b.get("type") == "tool_use"]
    reply: list[dict[str, Any]] = [{"type": "tool_result", "tool_use_id": c["id"], "is_error": True, "content": problem}
                                   for c in calls] or [{"type": "text", "text": problem}]
    return [{"role": "assistant", "content": content or [{"type": "text", "text": "(no answer)"}]},
            {"role": "user", "content": reply}]


Step = Stage | Callable[[Any], Awaitable[Any]]  # a plain async function: nested parallel(), its calls shared too


@dataclass
class Board:
    """What a live board shows: per stage (in the order stages first start), its items started, done, abstained."""

    stages: dict[str, dict[str, int]] = field(default_factory=dict)

    def hear(self, kind: str, data: dict[str, Any]) -> None:
        counts = self.stages.setdefault(data["stage"], {"started": 0, "done": 0, "abstained": 0})
        if kind == "started":
            counts["started"] += 1
        elif kind == "finished":
            counts["abstained" if data.get("abstained") else "done"] += 1

    @property
    def running(self) -> int:
        return sum(c["started"] - c["done"] - c["abstained"] for c in self.stages.values())


@dataclass
class Orchestra:
    """The calls of one orchestration: a shared concurrency limit, cost cap, run log, trace and event hook."""

    client: Any
    model_id: str
    limit: int = CONCURRENCY
    budget: Budget | None = None
    run_log: Any = None
    on_event: Callable[[str, dict[str, Any]], None] | None = None
    name: str = ""  # in every run log row's data as "orchestration": the rows of one run, told apart from others
    timeout: float = CALL_TIMEOUT_SECONDS  # seconds one request may take (the SDK's own retries included)
    calls: int = 0  # model requests made (retries and pause_turn continuations included; refused ones are not)
    agent_calls: int = 0  # stage invocations that made at least one request: the unit of the seed's cost formula
    usage: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
         "web_search_requests", "web_fetch_requests"), 0))
    cost_usd: float = 0.0
    board: Board = field(default_factory=Board)
    trace: list[dict[str, Any]] = field(default_factory=list)  # one entry per request: stage, item, outcome, tokens
    found: dict[tuple[str, str], dict[str, list]] = field(default_factory=dict)  # web evidence by (stage, item)
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
        self.board.hear(kind, data)
        if self.on_event is not None:
            self.on_event(kind, data)

    @property
    def stopped(self) -> str:
        """Why the cap refused a call ("" while none was refused)."""
        return self.budget.stopped if self.budget is not None else ""

    async def one(self, stage: Stage, item: Any, key: str = "0") -> Any:
        """One item through one stage: its answer (or carried value), or an Abstention."""
        return await self._step(stage, item, key)

    async def parallel(self, items: Iterable[Any], stage: Step, key: str = "", *, limit: int | None = None) -> list[Any]:
        """Each item through `stage` at once (under the shared limit, and at most `limit` of these at a time when
        given); the results in input order. `key` names a nested call's items apart (`KEY.0`, `KEY.1`...) in the
        trace, the run log and `found`."""
        prefix = f"{key}." if key else ""
        own = asyncio.Semaphore(limit) if limit else None

        async def one(i: int, item: Any) -> Any:
            if own is None:
                return await self._step(stage, item, f"{prefix}{i}")
            async with own:
                return await self._step(stage, item, f"{prefix}{i}")

        return list(await asyncio.gather(*(one(i, item) for i, item in enumerate(items))))

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
        if stage.carry is not None and not isinstance(answer, Abstention):
            return stage.carry(item, answer)
        return answer

    async def _ask(self, stage: Stage, item: Any, key: str) -> Any:
        """The stage's answer for one item, retried once when malformed; an Abstention when there is none."""
        messages: list[dict[str, Any]] = [{"role": "user", "content": stage.prompt(item)}]
        problem, made = "", [0]  # made: requests this agent sent (its run log rows), however it ends
        try:
            for attempt in range(1, ATTEMPTS + 1):
                request = stage.request(self.model_id, messages)
                try:
                    response, rows = await self._turn(request, stage.name, key, attempt, made)
                except (CapReached, ModelError) as error:
                    return Abstention(stage.name, item, str(error))
                if stage.web is not None:
                    self.found[(stage.name, key)] = {"citations": web_tools.evidence(response["content"]),
                                                     "consulted": web_tools.consulted(response["content"])}
                try:
                    if response.get("stop_reason") == "pause_turn":
                        raise _Malformed(f"the turn was still paused after {web_tools.MAX_CONTINUATIONS} "
                                         f"continuations: answer now by calling {stage.tool_name}")
                    answer = stage.read(response)
                except _Malformed as malformed:
                    problem = str(malformed)
                    self._record(rows, "malformed", problem)
                    messages = [*messages, *retry_turns(response, problem)]
                    continue
                self._record(rows, "answered", None)
                return answer
            return Abstention(stage.name, item, f"malformed twice: {problem}")
        finally:
            self.agent_calls += 1 if made[0] else 0

    async def _turn(self, request: dict[str, Any], stage: str, key: str, attempt: int, made: list[int]
                    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """One answer: a request and its pause_turn continuations (web_tools.complete; each part one call under the
        limit and the cap), merged into one response; the run log row of its last part, still to be recorded (each
        paused part is recorded as "paused" before its continuation is sent)."""
        last: list[dict[str, Any]] = []

        async def send(sent: dict[str, Any]) -> dict[str, Any]:
            if last:
                self._record([last.pop()], "paused", None)
            response, row = await self._call(sent, stage, key, attempt, made)
            last.append(row)
            return response

        response, _exchanges = await web_tools.complete(send, request)
        return response, last

    async def _call(self, request: dict[str, Any], stage: str, key: str, attempt: int, made: list[int]
                    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """One model request under the shared limit and the cap (CapReached: it was not made); its run log fields."""
        semaphore, client = self._here()
        row: dict[str, Any] = {"label": f"stage:{stage}", "model": self.model_id,
                               "harness": capabilities(self.client).harness, "requests": [request],
                               "data": {"stage": stage, "item": key, "attempt": attempt,
                                        **({"orchestration": self.name} if self.name else {})}}
        async with semaphore:
            held = self.budget.reserve(self.model_id, request) if self.budget is not None else 0.0
            started = time.perf_counter()
            made[0] += 1
            try:
                response = await asyncio.wait_for(client.acreate(request), self.timeout)
            except Exception as error:  # a timeout, a model error or a client's own failure: this agent's abstention
                failure = (error if isinstance(error, ModelError) else
                           ModelError(f"no answer within {self.timeout:g} s", kind="timeout")
                           if isinstance(error, asyncio.TimeoutError) else ModelError(f"{type(error).__name__}: {error}"))
                if self.budget is not None:
                    self.budget.settle(held, self.model_id, None)
                self._record([{**row, "seconds": time.perf_counter() - started}], "error", str(failure))
                raise failure from (None if failure is error else error)
        raw_usage = response.get("usage") or {}
        usage = {**usage_of(response), **web_tools.server_uses(raw_usage)}
        self.calls += 1
        for name, count in usage.items():
            self.usage[name] = self.usage.get(name, 0) + count
        cost = self.budget.settle(held, self.model_id, raw_usage) if self.budget is not None else cost_of(self.model_id, raw_usage)
        self.cost_usd += cost or 0.0
        return response, {**row, "seconds": time.perf_counter() - started, "usage": usage, "cost_usd": cost,
                          "responses": [response]}

    def _record(self, rows: list[dict[str, Any]], outcome: str, error: str | None) -> None:
        """Each request's trace line, and its run log row (kind "vote": its columns are exactly a call's)."""
        for row in rows:
            if not row:
                continue
            data, usage = row["data"], row.get("usage") or {}
            self.trace.append({"stage": data["stage"], "item": data["item"], "attempt": data["attempt"],
                               "outcome": outcome, "error": error, "seconds": row.get("seconds", 0.0),
                               "cost_usd": row.get("cost_usd"), **usage})
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


def run_in_loop_thread(make_coroutine):
    """Run a coroutine to completion in a worker thread with its own event loop (a notebook's kernel already runs
    one in the main thread). KeyboardInterrupt in the caller cancels it; the coroutine returns what it has. A
    verification and a research run go through it."""
    box: dict[str, Any] = {}
    started, finished = threading.Event(), threading.Event()

    def work() -> None:
        loop = asyncio.new_event_loop()
        try:
            box["task"] = loop.create_task(make_coroutine())
            box["loop"] = loop
            started.set()
            box["result"] = loop.run_until_complete(box["task"])
        except BaseException as error:  # handed to the caller's thread
            box["error"] = error
        finally:
            started.set()
            loop.close()
            finished.set()

    thread = threading.Thread(target=work, name="skills-magic-worker-loop", daemon=True)
    thread.start()
    # wait on an Event, not on join(): on Python <= 3.12 an interrupted join() can mark a live thread as stopped
    cancelled = False
    while not finished.is_set():
        try:
            finished.wait(0.1)
        except KeyboardInterrupt:
            if not cancelled:
                cancelled = True
                started.wait()
                if "loop" in box:
                    box["loop"].call_soon_threadsafe(box["task"].cancel)
    if "error" in box:
        raise box["error"]
    return box["result"]


__all__ = ["run_in_loop_thread", "BARRIER", "Abstention", "Board", "Orchestra", "Stage", "run", "retry_turns"]
