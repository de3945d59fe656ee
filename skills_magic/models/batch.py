"""Many first-turn model calls at once through the Message Batches API.

Why batches: a batch costs half the price of the same calls made one by one, holds up to 100,000 requests, and needs
no client-side rate limiting, which suits measuring skill activation (does the model's first turn call
`activate_skill`, and for which skill) over a large set of prompts. A batch ends within 24 hours, usually well within
one, so interactive work (the agent's tool loop, where each turn depends on the last) stays on the Messages API.

`run_batch(model, {custom_id: params})` creates the batch (several when there are more than
MAX_REQUESTS_PER_BATCH requests or more than MAX_BATCH_BYTES of them), polls until it has ended, reads its results
(JSON Lines, in no particular order, matched to the requests by custom_id) and gives the failed items one more
chance in a new batch. `batch_id=` resumes batches created earlier (after a kernel restart) without creating or
paying for them again: pass the same requests and every id `on_progress` reported or `BatchOutcome.batch_ids` holds.

Results for custom_ids that are not among the requests are ignored, never put in `errors` (whose keys are always
request ids); their ids are listed in `BatchOutcome.unknown_ids`. An SDK failure is a one-sentence `ModelError` that
never contains the key; once a batch exists the message names it, so the run can be resumed rather than paid twice.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from skills_magic.errors import InvalidArgument
from skills_magic.models.base import ModelError, capabilities, client_name

if TYPE_CHECKING:
    from skills_magic.models.anthropic import AnthropicModel

POLL_SECONDS = 30.0  # most batches end within an hour: a retrieve every 30 s is prompt enough and far from rate limits
MAX_REQUESTS_PER_BATCH = 100_000  # the API's limit on requests in one batch; more are split over several batches
MAX_BATCH_BYTES = 250 * 1024 * 1024  # the API refuses a batch over 256 MB: leave room for the JSON around the requests
RETRY_FAILED_ONCE = True  # errored/expired/canceled items get one new batch; a second failure is reported, not looped
NOT_RETRIED = frozenset({"invalid_request_error", "request_too_large"})  # the same request would fail the same way
CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # the API's pattern for custom_id (matched whole)
COUNTS = ("processing", "succeeded", "errored", "canceled", "expired")  # a batch's request_counts
_REASON_LIMIT = 300  # characters of an error reason: one line in a notebook

Progress = dict[str, Any]


@dataclass
class BatchOutcome:
    """What a batch run produced: every request id is in exactly one of `results` and `errors`."""

    batch_ids: list[str]  # every batch this run created or resumed, retries included, in order
    results: dict[str, dict]  # custom_id -> the Message as a dict (model_dump(mode="json", exclude_none=True))
    errors: dict[str, str]  # custom_id -> a one-line reason, after the retry
    unknown_ids: list[str] = field(default_factory=list)  # custom_ids in the results that no request had (ignored)


def run_batch(model: AnthropicModel, requests: Mapping[str, Mapping[str, Any]], *,
              batch_id: str | Sequence[str] | None = None, poll_seconds: float = POLL_SECONDS,
              on_progress: Callable[[Progress], None] | None = None,
              sleep: Callable[[float], Any] = time.sleep) -> BatchOutcome:
    """Run `requests` (custom_id -> Messages API params) as Message Batches and wait for every result.

    `batch_id` (one id or several) resumes batches made earlier for the same requests: nothing is created for them.
    `on_progress` gets a dict per retrieve: batch_id, batch_ids (all so far), round (1, or 2 for the retry),
    processing_status and the request counts (processing, succeeded, errored, canceled, expired).
    Before any HTTP call: InvalidArgument (a ValueError) for a bad custom_id or a streaming request, TypeError for
    params that are not a dict or a model that is not an AnthropicModel. ModelError when the API fails (with
    `.batch_ids` to resume).
    """
    prepared = _prepare(model, requests)
    resumed = _batch_ids(batch_id)
    if resumed and not prepared:
        raise InvalidArgument("resuming a batch needs the requests it was made from, to match its results by custom_id")
    run = _Run(model, poll_seconds, on_progress, sleep)
    if not prepared:
        return BatchOutcome([], {}, {})

    succeeded, failed = run.round(prepared, resumed, 1)
    retry = {cid: prepared[cid] for cid, (_, retryable) in failed.items() if retryable and RETRY_FAILED_ONCE}
    errors = {cid: f"{reason} (not retried: the same request would fail the same way)"
              for cid, (reason, retryable) in failed.items() if not retryable}
    if retry:
        again, still = run.round(retry, [], 2)
        succeeded.update(again)
        errors.update({cid: f"{reason} (after one retry)" for cid, (reason, _) in still.items()})
    else:
        errors.update({cid: reason for cid, (reason, retryable) in failed.items() if retryable})
    return BatchOutcome(list(run.batch_ids), {cid: succeeded[cid] for cid in prepared if cid in succeeded},
                        {cid: errors[cid] for cid in prepared if cid in errors}, sorted(run.unknown))


# --- checks before any HTTP call ------------------------------------------------------------------------------------


def _prepare(model: Any, requests: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    if not capabilities(model).supports_batches:
        raise TypeError(f"Message Batches go through the Anthropic API: run_batch needs an AnthropicModel, "
                        f"not {client_name(model)!r}")
    if not isinstance(requests, Mapping):
        raise TypeError(f"the batch requests must be a dict of custom_id -> params, not {type(requests).__name__}")
    bad = [cid for cid in requests if not isinstance(cid, str) or not CUSTOM_ID.fullmatch(cid)]
    if bad:
        shown = ", ".join(repr(cid) for cid in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise InvalidArgument(f"invalid batch custom_id {shown}: a custom_id is 1 to 64 letters, digits, '_' or '-'")
    prepared: dict[str, dict[str, Any]] = {}
    for cid, params in requests.items():
        if not isinstance(params, Mapping):
            raise TypeError(f"the params of batch request {cid!r} must be a dict of Messages API fields, "
                             f"not {type(params).__name__}")
        if params.get("stream"):
            raise InvalidArgument(f"batch request {cid!r} asks to stream: a batch request cannot stream")
        prepared[cid] = dict(params)
        if "model" not in prepared[cid] and model.model:  # the model run_batch was given
            prepared[cid] = {"model": model.model, **prepared[cid]}
    return prepared


def _batch_ids(batch_id: str | Sequence[str] | None) -> list[str]:
    ids = [batch_id] if isinstance(batch_id, str) else list(batch_id or [])
    if any(not isinstance(i, str) or not i.strip() for i in ids):
        raise InvalidArgument(f"a batch id to resume must be a non-empty string such as 'msgbatch_...', not {batch_id!r}")
    return ids


def _chunks(requests: dict[str, dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The create bodies' request lists: at most MAX_REQUESTS_PER_BATCH and (roughly) MAX_BATCH_BYTES each."""
    chunks: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    size = 0
    for cid, params in requests.items():
        entry = {"custom_id": cid, "params": params}
        entry_size = len(json.dumps(entry, ensure_ascii=False, default=str).encode("utf-8")) + 1
        if current and (len(current) >= MAX_REQUESTS_PER_BATCH or size + entry_size > MAX_BATCH_BYTES):
            chunks.append(current)
            current, size = [], 0
        current.append(entry)
        size += entry_size
    if current:
        chunks.append(current)
    return chunks


# --- one run: create, poll, read ------------------------------------------------------------------------------------


def _one_line(text: str, secret: str | None) -> str:
    if secret:
        text = text.replace(secret, "[redacted]")
    text = " ".join(text.split())
    return text if len(text) <= _REASON_LIMIT else text[: _REASON_LIMIT - 1] + "…"


def _failure(result: dict[str, Any], secret: str | None) -> tuple[str, bool]:
    """A failed result's one-line reason, and whether a retry could help."""
    kind = result.get("type")
    if kind == "errored":
        error = result.get("error") if isinstance(result.get("error"), dict) else {}
        inner = error.get("error") if isinstance(error.get("error"), dict) else error  # ErrorResponse, or a bare error
        error_type = str(inner.get("type") or "error")
        detail = f": {inner['message']}" if inner.get("message") else ""
        return _one_line(f"errored ({error_type}){detail}", secret), error_type not in NOT_RETRIED
    if kind == "expired":
        return "expired: the batch reached its 24-hour limit before this request ran", True
    if kind == "canceled":
        return "canceled: the batch was canceled before this request ran", True
    return _one_line(f"unexpected result type {kind!r}", secret), True


def _read_results(batches: Any, batch_id: str) -> list[dict[str, Any]]:
    """Every line of a batch's results file (the SDK streams it from the results_url) as a plain dict."""
    return [item.model_dump(mode="json", exclude_none=True) for item in batches.results(batch_id)]


class _Run:
    def __init__(self, model: Any, poll_seconds: float, on_progress: Callable[[Progress], None] | None,
                 sleep: Callable[[float], Any]):
        self.model = model
        self.poll_seconds = poll_seconds
        self.on_progress = on_progress
        self.sleep = sleep
        self.batch_ids: list[str] = []
        self.unknown: set[str] = set()

    def _fail(self, error: BaseException) -> ModelError:
        """The SDK's error as a ModelError without the key; once batches exist it says how to resume them."""
        import anthropic
        import httpx2

        from skills_magic.models.anthropic import model_error

        secret = self.model.api_key
        if isinstance(error, anthropic.AnthropicError):
            mapped = model_error(error, secret)
        elif isinstance(error, httpx2.HTTPError):  # the results stream broke after its response began
            mapped = ModelError(f"the batch results stopped arriving: {_one_line(str(error), secret)}",
                                kind="connection")
        else:  # a results line that is not JSON
            mapped = ModelError(f"the batch results could not be read: {_one_line(str(error), secret)}", kind="error")
        if self.batch_ids:
            ids = self.batch_ids[0] if len(self.batch_ids) == 1 else self.batch_ids
            message = (f"{mapped} (the batch{'es' if len(self.batch_ids) > 1 else ''} "
                       f"{', '.join(self.batch_ids)} already exist: run again with batch_id={ids!r} to resume)")
            mapped = ModelError(message, mapped.status, mapped.kind)
        mapped.batch_ids = list(self.batch_ids)
        return mapped

    def _sdk(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        import anthropic
        import httpx2

        try:
            return call(*args, **kwargs)
        except (anthropic.AnthropicError, httpx2.HTTPError, ValueError) as error:
            raise self._fail(error) from None

    def round(self, requests: dict[str, dict[str, Any]], resumed: list[str], number: int
              ) -> tuple[dict[str, dict], dict[str, tuple[str, bool]]]:
        """Create (or resume) batches for `requests`, wait for them, and sort their results: successes, failures."""
        batches = self._sdk(lambda: self.model.client().messages.batches)  # building the client can fail (no key)
        if resumed:
            ids = list(resumed)
            self.batch_ids.extend(ids)
        else:
            ids = []
            for chunk in _chunks(requests):
                created = self._sdk(batches.create, requests=chunk)
                ids.append(created.id)
                self.batch_ids.append(created.id)
        self._wait(batches, ids, number)
        return self._results(batches, ids, requests)

    def _wait(self, batches: Any, ids: list[str], number: int) -> None:
        waiting = list(ids)
        while True:
            still = []
            for batch_id in waiting:
                batch = self._sdk(batches.retrieve, batch_id)
                if self.on_progress is not None:
                    counts = batch.request_counts
                    self.on_progress({"batch_id": batch.id, "batch_ids": list(self.batch_ids), "round": number,
                                      "processing_status": batch.processing_status,
                                      **{name: int(getattr(counts, name, 0) or 0) for name in COUNTS}})
                if batch.processing_status != "ended":
                    still.append(batch_id)
            if not still:
                return
            waiting = still
            self.sleep(self.poll_seconds)

    def _results(self, batches: Any, ids: list[str], requests: dict[str, dict[str, Any]]
                 ) -> tuple[dict[str, dict], dict[str, tuple[str, bool]]]:
        secret = self.model.api_key
        succeeded: dict[str, dict] = {}
        failed: dict[str, tuple[str, bool]] = {}
        for batch_id in ids:
            lines = self._sdk(_read_results, batches, batch_id)
            for line in lines:
                cid = line.get("custom_id")
                if cid not in requests:
                    self.unknown.add(str(cid))
                    continue
                result = line.get("result") if isinstance(line.get("result"), dict) else {}
                if result.get("type") == "succeeded" and isinstance(result.get("message"), dict):
                    succeeded[cid] = result["message"]
                    failed.pop(cid, None)
                elif cid not in succeeded:  # across resumed batches a success wins over a failure
                    failed[cid] = _failure(result, secret)
        for cid in requests:
            if cid not in succeeded and cid not in failed:
                failed[cid] = ("no result for this request in the batch results", True)
        return succeeded, failed
