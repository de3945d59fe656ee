"""Budget caps: a run, a verification or an eval stops before the model call that would cross its cap in dollars.

A `Budget` holds the cap, what was spent (each call's reported usage at the price table, `models.prices`) and what
calls in flight may still spend. Before each call it estimates the call's cost: its input tokens from the request's
size (characters / 4, or the API's own count where a counter is given), its output at the request's `max_tokens`,
so a cap is never crossed by an answer longer than expected. A call that would cross it is not made: `CapReached`
says how much was spent. Before a verification or an eval starts, `preflight` estimates all of it (requests x
tokens x price) for the front end to show; unattended, with no cap, an eval above `ASK_ABOVE_USD` asks first.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from skills_magic.errors import SkillsMagicError
from skills_magic.models.prices import cost_of

MAX_COST_ENV = "SKILLS_MAGIC_MAX_COST"  # the session's default cap in US dollars (a flag's --max-cost wins)
ASK_ABOVE_USD = 5.0  # an eval estimated above this with no cap asks before it starts: more than a few minutes' tinkering
CHARS_PER_TOKEN = 4  # a request's characters per token, roughly, when the API's count is not at hand
WEB_SEARCHES_UNBOUNDED = 10  # a web search tool without max_uses is held at this many searches (the API's loop pauses near it)
STOP_REASON = "max_cost"  # RunResult.stop_reason of a run its cap stopped


class BudgetError(SkillsMagicError, ValueError):
    """A cap that cannot be used: negative, not a number, or for a model with no price."""


class CapReached(SkillsMagicError):
    """The next call would cross the cap: it was not made."""


class SpendNotApproved(SkillsMagicError):
    """An eval estimated above the threshold, with no cap set, that nobody approved."""


def read_cap(value: Any, where: str = "--max-cost") -> float | None:
    """A cap in US dollars from what the user gave (None: no cap); 0 or more."""
    if value is None or value == "":
        return None
    try:
        cap = float(str(value).strip().lstrip("$"))
    except ValueError:
        raise BudgetError(f"{where} is a number of US dollars (e.g. 0.50), not {value!r}") from None
    if not math.isfinite(cap) or cap < 0:
        raise BudgetError(f"{where} must be 0 or more US dollars, not {value!r}")
    return cap


def session_cap(explicit: float | None = None) -> float | None:
    """The cap a run gets: its own --max-cost, else SKILLS_MAGIC_MAX_COST, else none."""
    return read_cap(explicit, "--max-cost") if explicit is not None else read_cap(os.environ.get(MAX_COST_ENV), MAX_COST_ENV)


def capped(max_cost: float | None = None) -> Budget | None:
    """A run's own Budget under its cap (--max-cost, else SKILLS_MAGIC_MAX_COST); None when it has none."""
    cap = session_cap(max_cost)
    return None if cap is None else Budget(cap)


def estimated_input_tokens(request: Mapping[str, Any]) -> int:
    """The tokens a request's system prompt, tools and messages come to, by their size (characters / 4, rounded up)."""
    sent = {key: request[key] for key in ("system", "tools", "messages") if key in request}
    return math.ceil(len(json.dumps(sent, ensure_ascii=False)) / CHARS_PER_TOKEN)


def dollars(amount: float | None) -> str:
    return "an unknown amount" if amount is None else f"${amount:.4f}" if amount < 1 else f"${amount:,.2f}"


@dataclass(frozen=True)
class Estimate:
    """What a verification or an eval is expected to cost before it starts."""

    what: str  # "verify", "eval"
    requests: int
    input_tokens: int  # all requests together
    output_tokens: int  # all requests at their max_tokens: the most they can cost
    cost_usd: float | None  # None: the model has no price
    model: str
    cap: float | None
    billed: bool = True  # False: a scripted model's or a cassette's, which spend nothing

    @property
    def shown(self) -> bool:
        """Worth showing before the start: something can be spent, or a cap is to be kept, and a request is made."""
        return self.requests > 0 and (self.billed or self.cap is not None)

    def describe(self) -> str:
        cap = f"; cap {dollars(self.cap)}" if self.cap is not None else "; no cap (--max-cost)"
        return (f"estimate before the {self.what}: {self.requests:,} requests x about {self.input_tokens // max(self.requests, 1):,}"
                f" input tokens + at most {self.output_tokens // max(self.requests, 1):,} output tokens at {self.model}'s "
                f"price: at most {dollars(self.cost_usd)}{cap}")


class Budget:
    """The cap of one run, verification or eval, and what its calls spent; safe to share between threads."""

    def __init__(self, cap: float | None, count_tokens: Callable[[Mapping[str, Any]], int] | None = None):
        self.cap = read_cap(cap)
        self.count_tokens = count_tokens  # the API's token counting, where the client offers it
        self.spent = 0.0
        self.held = 0.0  # estimates of the calls in flight
        self.calls = 0
        self.stopped: str = ""  # the note, once a call was refused: every later call is refused too
        self.estimate: Estimate | None = None  # the pre-flight estimate, once made
        self._lock = threading.Lock()

    def call_cost(self, model_id: str, request: Mapping[str, Any]) -> float | None:
        """The most one call can cost: its input tokens, its output at max_tokens, and every web search its server
        tools may make (their max_uses; unbounded counts as WEB_SEARCHES_UNBOUNDED), at the model's price."""
        tokens = self.count_tokens(request) if self.count_tokens is not None else estimated_input_tokens(request)
        searches = sum(int(t.get("max_uses") or WEB_SEARCHES_UNBOUNDED) for t in request.get("tools") or []
                       if str(t.get("type", "")).startswith("web_search"))
        return cost_of(model_id, {"input_tokens": tokens, "output_tokens": int(request.get("max_tokens") or 0),
                                  "server_tool_use": {"web_search_requests": searches}})

    def reserve(self, model_id: str, request: Mapping[str, Any]) -> float:
        """Hold the call's estimate before it is made; CapReached when spent + held + estimate would cross the cap."""
        if self.cap is None:
            return 0.0
        estimate = self.call_cost(model_id, request)
        if estimate is None:
            raise BudgetError(f"there is no price for {model_id!r}, so the cap of {dollars(self.cap)} cannot be kept: "
                              f"give one with `%skills price {model_id} input=DOLLARS output=DOLLARS`")
        with self._lock:
            if not self.stopped and self.spent + self.held + estimate > self.cap:
                self.stopped = (f"stopped before a call that would cross the cap of {dollars(self.cap)}: spent "
                                f"{dollars(self.spent)}")
            if self.stopped:
                raise CapReached(self.stopped)
            self.held += estimate
        return estimate

    def settle(self, held: float, model_id: str, usage: Mapping[str, Any] | None, *, batch: bool = False) -> float | None:
        """A call came back (usage: what it reported; None: it failed): its hold is released, its cost spent."""
        cost = cost_of(model_id, usage, batch=batch) if usage else None
        with self._lock:
            self.held = max(self.held - held, 0.0)
            self.spent += cost or 0.0
            self.calls += 1
        return cost

    def preflight(self, what: str, model_id: str, requests: Iterable[tuple[Mapping[str, Any], int]], *,
                  batch: bool = False, billed: bool = True) -> Estimate:
        """The estimate of a whole verification or eval: each (request, the model calls it may make) at its
        max_tokens. With a cap, a model with no price is refused here, before anything is spent."""
        listed = list(requests)
        size = self.count_tokens or estimated_input_tokens
        tokens = sum(size(request) * calls for request, calls in listed)
        output = sum(int(request.get("max_tokens") or 0) * calls for request, calls in listed)
        cost = cost_of(model_id, {"input_tokens": tokens, "output_tokens": output}, batch=batch) if listed else 0.0
        if cost is None and self.cap is not None:
            raise BudgetError(f"there is no price for {model_id!r}, so the cap of {dollars(self.cap)} cannot be kept: "
                              f"give one with `%skills price {model_id} input=DOLLARS output=DOLLARS`")
        self.estimate = Estimate(what, sum(calls for _request, calls in listed), tokens, output, cost, model_id, self.cap,
                                 billed)
        return self.estimate


@dataclass(frozen=True)
class SpendRequest:
    """What a person sees before an expensive eval with no cap: the asker's prompt (it reads `describe()`)."""

    estimate: Estimate
    skill: str = "(eval)"
    path: str = "spend"

    def describe(self) -> str:
        return (f"{self.estimate.describe()}\nthat is more than {dollars(ASK_ABOVE_USD)} with no cap set "
                f"(--max-cost, or {MAX_COST_ENV})")


def approve(estimate: Estimate, asker: Callable[[Any], str] | None) -> None:
    """With no cap and an estimate above ASK_ABOVE_USD, ask (unattended: nobody can answer, so it stops)."""
    if estimate.cap is not None or estimate.cost_usd is None or estimate.cost_usd <= ASK_ABOVE_USD:
        return
    refused = (f"the {estimate.what} would cost up to {dollars(estimate.cost_usd)}, more than {dollars(ASK_ABOVE_USD)}, "
               f"with no cap set, and nobody approved it: set a cap with --max-cost USD (or {MAX_COST_ENV}) to run it")
    try:
        answer = asker(SpendRequest(estimate)) if asker is not None else "deny"
    except Exception:  # Unattended, StdinNotImplementedError, EOFError: nobody can answer here
        raise SpendNotApproved(refused) from None
    if answer not in ("once", "always"):
        raise SpendNotApproved(refused)
