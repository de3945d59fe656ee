"""Message Batches (`skills_magic.models.batch.run_batch`) through the real `anthropic` SDK, with a fake batch service.

`FakeBatches` answers what the SDK sends: `POST /v1/messages/batches` (create), `GET /v1/messages/batches/{id}`
(retrieve: "in_progress" for the first few polls, then "ended" with the counts and a results_url), and
`GET {results_url}` (the results as JSON Lines, in reverse request order). Nothing sleeps: the poll interval is 0 and
the `sleep` given to run_batch only records its calls.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from typing import Any

import httpx2
import pytest

from fake_anthropic import Error, FakeAnthropicServer, sent_key, text_message
from skills_magic.models import batch as batch_module
from skills_magic.models.batch import (CUSTOM_ID, MAX_REQUESTS_PER_BATCH, POLL_SECONDS, RETRY_FAILED_ONCE, BatchOutcome,
                                run_batch)
from skills_magic.models.anthropic import AnthropicModel
from skills_magic.models.base import ModelError

KEY = "sk-ant-fake-batch-0123456789KEYVALUE"
MODEL_ID = "claude-test-1"
BATCH_PATH = re.compile(r"^/v1/messages/batches/(?P<id>[^/?]+)(?P<results>/results)?$")


pytestmark = pytest.mark.usefixtures("machine_setup_forgotten")


# --- the fake batch service --------------------------------------------------------------------------------------


def succeeded(custom_id: str, params: dict, number: int) -> dict:
    """A succeeded result whose text names the request, so a mismatch cannot go unnoticed."""
    return {"type": "succeeded", "message": text_message(f"answer to {custom_id} from batch {number}", model=params["model"],
                                                         id=f"msg_{custom_id}_{number}")}


def errored(error_type: str, message: str) -> dict:
    """An errored result as the API sends it: an ErrorResponse ({"type": "error", "error": {type, message}})."""
    return {"type": "errored", "error": {"type": "error", "error": {"type": error_type, "message": message},
                                         "request_id": "req_fake_batch"}}


EXPIRED = {"type": "expired"}
CANCELED = {"type": "canceled"}
COUNT_OF = {"succeeded": "succeeded", "errored": "errored", "expired": "expired", "canceled": "canceled"}
Outcome = Callable[[str, dict, int], "dict | None"]  # (custom_id, params, batch number) -> result, or None: no line


class FakeBatches:
    """The Message Batches API, recorded: every create body, every (method, path), the headers of each request."""

    def __init__(self, outcome: Outcome = succeeded, polls_before_end: int = 2, extra_lines: list[dict] | None = None):
        self.outcome = outcome
        self.polls_before_end = polls_before_end  # retrieves answered "in_progress" before "ended"
        self.extra_lines = extra_lines or []  # result lines for custom_ids no request had
        self.created: list[dict] = []  # the bodies of POST /v1/messages/batches
        self.batches: dict[str, dict] = {}  # id -> {"requests", "number", "polls", "lines"}
        self.calls: list[tuple[str, str]] = []
        self.headers: list[dict[str, str]] = []
        self.fail: dict[tuple[str, str], Error] = {}  # (method, "create" | "retrieve" | "results") -> an error reply
        self._lock = threading.Lock()

    # what run_batch asked for
    def create_calls(self) -> int:
        return sum(1 for method, path in self.calls if method == "POST")

    def created_ids(self) -> list[list[str]]:
        return [[r["custom_id"] for r in body["requests"]] for body in self.created]

    # the API
    def _batch_json(self, batch_id: str, base: str) -> dict[str, Any]:
        batch = self.batches[batch_id]
        ended = batch["polls"] > self.polls_before_end
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        if ended:
            for line in batch["lines"]:
                kind = line["result"]["type"]
                counts[COUNT_OF[kind]] += 1 if line["custom_id"] in batch["ids"] else 0
            counts["errored"] += len(batch["ids"]) - sum(counts.values())  # a request with no line: counted as errored
        else:
            counts["processing"] = len(batch["ids"])
        return {"id": batch_id, "type": "message_batch", "processing_status": "ended" if ended else "in_progress",
                "request_counts": counts, "created_at": "2026-01-01T00:00:00Z", "expires_at": "2026-01-02T00:00:00Z",
                "ended_at": "2026-01-01T00:05:00Z" if ended else None, "archived_at": None,
                "cancel_initiated_at": None,
                "results_url": f"{base}/v1/messages/batches/{batch_id}/results" if ended else None}

    def add_batch(self, requests: list[dict]) -> str:
        """A batch as if created earlier (say, before a kernel restart)."""
        with self._lock:
            number = len(self.batches) + 1
            batch_id = f"msgbatch_fake_{number:04d}"
            lines = []
            for request in requests:
                result = self.outcome(request["custom_id"], request["params"], number)
                if result is not None:
                    lines.append({"custom_id": request["custom_id"], "result": result})
            lines.reverse()  # results come in no particular order: here, the reverse of the requests
            lines.extend({"custom_id": cid, "result": result} for cid, result in self.extra_lines)
            self.batches[batch_id] = {"ids": [r["custom_id"] for r in requests], "number": number, "polls": 0,
                                      "lines": lines}
            return batch_id

    def respond(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, dict[str, str], bytes]:
        headers = {k.lower(): v for k, v in headers.items()}
        self.calls.append((method, path))
        self.headers.append(headers)
        base = f"http://{headers['host']}"
        path = path.split("?")[0].rstrip("/")
        match = BATCH_PATH.match(path)
        if method == "POST" and path == "/v1/messages/batches":
            action = "create"
        elif method == "GET" and match:
            action = "results" if match["results"] else "retrieve"
        else:
            return self._error(Error(404, f"the fake serves the batch API, not {method} {path}",
                                     headers={"x-should-retry": "false"}))
        if (method, action) in self.fail:
            return self._error(self.fail[(method, action)])
        if action == "create":
            body = json.loads(raw)
            self.created.append(body)
            batch_id = self.add_batch(body["requests"])
            return self._json(self._batch_json(batch_id, base))
        batch_id = match["id"]
        if batch_id not in self.batches:
            return self._error(Error(404, f"no batch {batch_id}", headers={"x-should-retry": "false"}))
        if action == "retrieve":
            self.batches[batch_id]["polls"] += 1
            return self._json(self._batch_json(batch_id, base))
        if self.batches[batch_id]["polls"] <= self.polls_before_end:
            return self._error(Error(400, "the batch has not ended", headers={"x-should-retry": "false"}))
        lines = "".join(json.dumps(line) + "\n" for line in self.batches[batch_id]["lines"])
        return 200, {"content-type": "application/binary"}, lines.encode("utf-8")

    @staticmethod
    def _json(value: dict) -> tuple[int, dict[str, str], bytes]:
        return 200, {"content-type": "application/json", "request-id": "req_fake_batch"}, json.dumps(value).encode()

    @staticmethod
    def _error(error: Error) -> tuple[int, dict[str, str], bytes]:
        return error.status, error.all_headers(), json.dumps(error.body()).encode()

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        status, headers, body = self.respond(request.method, request.url.raw_path.decode(), dict(request.headers),
                                             request.read())
        return httpx2.Response(status, headers=headers, content=body)

    def model(self, **kwargs) -> AnthropicModel:
        kwargs.setdefault("api_key", KEY)
        return AnthropicModel(MODEL_ID, http_client=httpx2.Client(transport=httpx2.MockTransport(self.handler)), **kwargs)


class FakeBatchServer(FakeAnthropicServer):
    """FakeBatches on a real socket (127.0.0.1, a free port): the handler asks `api.respond`, so swap the API in."""

    def __init__(self, batches: FakeBatches):
        super().__init__()
        self.api = batches
        self.httpd.RequestHandlerClass.api = batches


def params(text: str, **extra) -> dict:
    return {"model": MODEL_ID, "max_tokens": 64, "messages": [{"role": "user", "content": text}], **extra}


def some_requests(*ids: str) -> dict[str, dict]:
    return {cid: params(f"prompt for {cid}") for cid in ids}


def as_returned(message: dict) -> dict:
    """A served Message as run_batch returns it: the SDK's model_dump(mode="json", exclude_none=True)."""
    return {k: v for k, v in message.items() if v is not None}


class Recorder:
    def __init__(self):
        self.progress: list[dict] = []
        self.sleeps: list[float] = []

    def on_progress(self, progress: dict) -> None:
        self.progress.append(progress)

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)


def run(fake: FakeBatches, requests: dict, recorder: Recorder | None = None, **kwargs) -> BatchOutcome:
    recorder = recorder or Recorder()
    kwargs.setdefault("model", fake.model())
    return run_batch(kwargs.pop("model"), requests, poll_seconds=0, on_progress=recorder.on_progress,
                     sleep=recorder.sleep, **kwargs)


# --- the module's settings -----------------------------------------------------------------------------------------


def test_the_settings_match_the_api():
    assert MAX_REQUESTS_PER_BATCH == 100_000
    assert RETRY_FAILED_ONCE is True
    assert POLL_SECONDS > 0
    assert CUSTOM_ID.fullmatch("abc_DEF-123") and not CUSTOM_ID.fullmatch("x" * 65)


# --- one batch -----------------------------------------------------------------------------------------------------


def test_a_batch_holds_every_request_polls_until_ended_and_matches_results_by_custom_id():
    fake = FakeBatches(polls_before_end=2)
    requests = {"first": params("one"), "second": params("two", system="Be brief."), "third-3": params("three")}
    recorder = Recorder()

    outcome = run(fake, requests, recorder)

    assert fake.created == [{"requests": [{"custom_id": cid, "params": p} for cid, p in requests.items()]}]
    assert outcome.batch_ids == ["msgbatch_fake_0001"]
    assert outcome.errors == {} and outcome.unknown_ids == []
    assert list(outcome.results) == ["first", "second", "third-3"]  # the requests' order, not the results file's
    for cid, message in outcome.results.items():
        assert message == as_returned(succeeded(cid, requests[cid], 1)["message"])
    # every retrieve is reported, with the batch id and the request counts
    assert [p["processing_status"] for p in recorder.progress] == ["in_progress", "in_progress", "ended"]
    assert recorder.progress[0] == {"batch_id": "msgbatch_fake_0001", "batch_ids": ["msgbatch_fake_0001"], "round": 1,
                                    "processing_status": "in_progress", "processing": 3, "succeeded": 0, "errored": 0,
                                    "canceled": 0, "expired": 0}
    assert recorder.progress[-1] == {"batch_id": "msgbatch_fake_0001", "batch_ids": ["msgbatch_fake_0001"],
                                     "round": 1, "processing_status": "ended", "processing": 0, "succeeded": 3,
                                     "errored": 0, "canceled": 0, "expired": 0}
    assert recorder.sleeps == [0, 0]  # between polls only, never after the last
    # the SDK's paths: create, three polls, then results (which retrieves once more for the results_url)
    assert fake.calls == [("POST", "/v1/messages/batches")] + [("GET", "/v1/messages/batches/msgbatch_fake_0001")] * 4 + [
        ("GET", "/v1/messages/batches/msgbatch_fake_0001/results")]
    assert all(sent_key(h) == KEY for h in fake.headers)
    assert fake.headers[-1]["accept"] == "application/binary"  # how the SDK asks for the results file
    served = [json.loads(line)["custom_id"] for line in
              fake.handler(httpx2.Request("GET", "http://api.test/v1/messages/batches/msgbatch_fake_0001/results")
                           ).text.splitlines()]
    assert served == ["third-3", "second", "first"]  # the fake really did serve them out of order


def test_a_request_without_a_model_gets_the_models_id_and_the_callers_dicts_are_not_changed():
    fake = FakeBatches(polls_before_end=0)
    request = {"max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}

    outcome = run(fake, {"a": request}, model=fake.model())

    assert fake.created[0]["requests"][0]["params"] == {"model": MODEL_ID, **request}
    assert "model" not in request
    assert outcome.results["a"]["model"] == MODEL_ID


def test_no_requests_make_no_call():
    fake = FakeBatches()

    assert run(fake, {}) == BatchOutcome([], {}, {})
    assert fake.calls == []


# --- retries -------------------------------------------------------------------------------------------------------


def test_an_errored_item_is_retried_once_in_a_second_batch_and_succeeds_there():
    def outcome(cid, p, number):
        return errored("overloaded_error", "Overloaded") if cid == "b" and number == 1 else succeeded(cid, p, number)

    fake = FakeBatches(outcome, polls_before_end=1)
    requests = some_requests("a", "b", "c")
    recorder = Recorder()

    result = run(fake, requests, recorder)

    assert fake.created_ids() == [["a", "b", "c"], ["b"]]
    assert fake.created[1]["requests"][0]["params"] == requests["b"]
    assert result.batch_ids == ["msgbatch_fake_0001", "msgbatch_fake_0002"]
    assert result.errors == {}
    assert result.results["b"]["content"][0]["text"] == "answer to b from batch 2"
    assert result.results["a"]["content"][0]["text"] == "answer to a from batch 1"
    ended = [p for p in recorder.progress if p["processing_status"] == "ended"]
    assert [(p["round"], p["succeeded"], p["errored"]) for p in ended] == [(1, 2, 1), (2, 1, 0)]
    assert ended[-1]["batch_ids"] == result.batch_ids


def test_an_item_that_fails_again_ends_up_in_errors_with_its_reason():
    def outcome(cid, p, number):
        return errored("api_error", "Internal server error\nat the batch worker") if cid == "b" else succeeded(cid, p, number)

    fake = FakeBatches(outcome, polls_before_end=0)

    result = run(fake, some_requests("a", "b"))

    assert fake.created_ids() == [["a", "b"], ["b"]]  # retried once, not more
    assert list(result.results) == ["a"]
    assert result.errors == {"b": "errored (api_error): Internal server error at the batch worker (after one retry)"}
    assert "\n" not in result.errors["b"]


@pytest.mark.parametrize("failure, reason", [(EXPIRED, "expired"), (CANCELED, "canceled"),
                                             (None, "no result for this request")])
def test_expired_canceled_and_missing_items_are_retried_too(failure, reason):
    fake = FakeBatches(lambda cid, p, number: failure if cid == "x" else succeeded(cid, p, number), polls_before_end=0)

    result = run(fake, some_requests("x", "y"))

    assert fake.created_ids() == [["x", "y"], ["x"]]
    assert list(result.results) == ["y"]
    assert result.errors["x"].startswith(reason) and result.errors["x"].endswith("(after one retry)")


def test_an_invalid_request_is_not_retried_since_it_would_fail_the_same_way():
    def outcome(cid, p, number):
        return errored("invalid_request_error", "max_tokens: field required") if cid == "bad" else succeeded(cid, p, number)

    fake = FakeBatches(outcome, polls_before_end=0)

    result = run(fake, some_requests("bad", "good"))

    assert fake.created_ids() == [["bad", "good"]]
    assert result.errors == {"bad": "errored (invalid_request_error): max_tokens: field required "
                                    "(not retried: the same request would fail the same way)"}
    assert list(result.results) == ["good"]


def test_without_retry_failures_are_reported_from_the_first_batch(monkeypatch):
    monkeypatch.setattr(batch_module, "RETRY_FAILED_ONCE", False)
    fake = FakeBatches(lambda cid, p, number: EXPIRED if cid == "x" else succeeded(cid, p, number), polls_before_end=0)

    result = run(fake, some_requests("x", "y"))

    assert fake.create_calls() == 1
    assert result.errors == {"x": "expired: the batch reached its 24-hour limit before this request ran"}


def test_results_for_unknown_custom_ids_are_ignored_and_listed():
    fake = FakeBatches(polls_before_end=0, extra_lines=[("stranger", succeeded("stranger", params("?"), 1)),
                                                         ("other_one", EXPIRED)])

    result = run(fake, some_requests("a"))

    assert list(result.results) == ["a"] and result.errors == {}
    assert result.unknown_ids == ["other_one", "stranger"]
    assert fake.create_calls() == 1


# --- resuming ------------------------------------------------------------------------------------------------------


def test_resuming_with_the_batch_id_creates_nothing_and_returns_the_same_results():
    fake = FakeBatches(polls_before_end=1)
    requests = some_requests("a", "b")
    first = run(fake, requests)

    again = run(fake, requests, batch_id=first.batch_ids[0], model=fake.model())

    assert fake.create_calls() == 1
    assert again == first


def test_a_run_interrupted_while_polling_resumes_from_the_id_it_reported():
    """A kernel restart mid-poll: the id from on_progress is all that survives; resuming polls and reads, never creates."""
    fake = FakeBatches(polls_before_end=3)
    requests = some_requests("a", "b", "c")
    seen: list[str] = []

    def interrupt(progress):
        seen.append(progress["batch_id"])
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_batch(fake.model(), requests, poll_seconds=0, on_progress=interrupt, sleep=lambda s: None)
    recorder = Recorder()
    result = run(fake, requests, recorder, batch_id=seen[0])

    assert fake.create_calls() == 1
    assert [p["processing_status"] for p in recorder.progress] == ["in_progress", "in_progress", "ended"]
    assert result.batch_ids == seen and list(result.results) == ["a", "b", "c"] and result.errors == {}


def test_resuming_a_retry_needs_every_batch_id_and_a_success_outweighs_an_earlier_failure():
    def outcome(cid, p, number):
        return errored("overloaded_error", "Overloaded") if cid == "b" and number == 1 else succeeded(cid, p, number)

    fake = FakeBatches(outcome, polls_before_end=0)
    requests = some_requests("a", "b")
    first = run(fake, requests)

    again = run(fake, requests, batch_id=first.batch_ids)

    assert fake.create_calls() == 2  # the two of the first run only
    assert again.results == first.results and again.errors == {}


def test_resuming_without_the_requests_is_refused():
    fake = FakeBatches()

    with pytest.raises(ValueError, match="needs the requests"):
        run(fake, {}, batch_id="msgbatch_fake_0001")
    with pytest.raises(ValueError, match="non-empty string"):
        run(fake, some_requests("a"), batch_id="")
    assert fake.calls == []


# --- bad input and API failures ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["", "has space", "a/b", "x" * 65, "trailing\n", "ünï", 7])
def test_invalid_custom_ids_raise_before_any_http_call(bad):
    fake = FakeBatches()

    with pytest.raises(ValueError, match="invalid batch custom_id") as raised:
        run(fake, {"fine": params("ok"), bad: params("bad")})

    assert repr(bad) in str(raised.value)
    assert fake.calls == []


@pytest.mark.parametrize("bad_params, error, message", [({"stream": True, **params("x")}, ValueError, "cannot stream"),
                                                        ("just text", TypeError, "must be a dict")])
def test_bad_params_raise_before_any_http_call(bad_params, error, message):
    fake = FakeBatches()

    with pytest.raises(error, match=message):
        run(fake, {"a": bad_params})
    assert fake.calls == []


def test_a_model_that_is_not_anthropic_is_refused():
    class Scripted:
        name = "scripted"

    with pytest.raises(TypeError, match="needs an AnthropicModel, not 'scripted'"):
        run_batch(Scripted(), some_requests("a"))


def test_http_401_on_create_is_an_authentication_model_error_without_the_key():
    fake = FakeBatches()
    fake.fail[("POST", "create")] = Error(401, f"invalid x-api-key: {KEY}")

    with pytest.raises(ModelError) as raised:
        run(fake, some_requests("a"))

    assert raised.value.kind == "authentication" and raised.value.status == 401
    assert KEY not in str(raised.value) and "[redacted]" in str(raised.value)
    assert raised.value.batch_ids == [] and "batch_id=" not in str(raised.value)
    assert fake.created == []


def test_a_failure_after_the_batch_exists_names_it_for_resuming():
    fake = FakeBatches(polls_before_end=1)
    fake.fail[("GET", "retrieve")] = Error(500, f"broken for {KEY}", headers={"x-should-retry": "false"})

    with pytest.raises(ModelError) as raised:
        run(fake, some_requests("a"), model=fake.model(max_retries=0))

    assert raised.value.kind == "server" and KEY not in str(raised.value)
    assert "batch_id='msgbatch_fake_0001'" in str(raised.value)
    assert raised.value.batch_ids == ["msgbatch_fake_0001"]


def test_a_broken_results_file_is_a_model_error():
    fake = FakeBatches(polls_before_end=0)
    real = fake.respond

    def respond(method, path, headers, raw):
        status, headers_out, body = real(method, path, headers, raw)
        return (status, headers_out, b'{"custom_id": "a", "res\n') if path.endswith("/results") else (status, headers_out, body)

    fake.respond = respond

    with pytest.raises(ModelError, match="could not be read.*batch_id='msgbatch_fake_0001'"):
        run(fake, some_requests("a"))


# --- splitting -----------------------------------------------------------------------------------------------------


def test_more_requests_than_one_batch_holds_are_split_over_several(monkeypatch):
    monkeypatch.setattr(batch_module, "MAX_REQUESTS_PER_BATCH", 2)
    fake = FakeBatches(polls_before_end=1)
    requests = some_requests("r1", "r2", "r3", "r4", "r5")
    recorder = Recorder()

    result = run(fake, requests, recorder)

    assert fake.created_ids() == [["r1", "r2"], ["r3", "r4"], ["r5"]]
    assert result.batch_ids == ["msgbatch_fake_0001", "msgbatch_fake_0002", "msgbatch_fake_0003"]
    assert list(result.results) == list(requests) and result.errors == {}
    assert result.results["r5"]["content"][0]["text"] == "answer to r5 from batch 3"
    # each poll round asks every batch still open, then sleeps once
    assert [p["batch_id"][-1] for p in recorder.progress] == ["1", "2", "3", "1", "2", "3"]
    assert recorder.sleeps == [0]


def test_requests_over_the_size_limit_are_split_too(monkeypatch):
    size = len(json.dumps({"custom_id": "r1", "params": params("prompt for r1")}).encode()) + 1
    monkeypatch.setattr(batch_module, "MAX_BATCH_BYTES", 2 * size)
    fake = FakeBatches(polls_before_end=0)

    result = run(fake, some_requests("r1", "r2", "r3"))

    assert fake.created_ids() == [["r1", "r2"], ["r3"]]
    assert list(result.results) == ["r1", "r2", "r3"]


def test_a_split_run_retries_its_failures_in_one_new_batch(monkeypatch):
    monkeypatch.setattr(batch_module, "MAX_REQUESTS_PER_BATCH", 2)
    fake = FakeBatches(lambda cid, p, n: EXPIRED if cid in ("r1", "r3") and n < 3 else succeeded(cid, p, n),
                       polls_before_end=0)

    result = run(fake, some_requests("r1", "r2", "r3"))

    assert fake.created_ids() == [["r1", "r2"], ["r3"], ["r1", "r3"]]
    assert list(result.results) == ["r1", "r2", "r3"] and result.errors == {}


# --- a real socket -------------------------------------------------------------------------------------------------


def test_a_batch_through_the_local_fake_server():
    fake = FakeBatches(lambda cid, p, n: errored("overloaded_error", "Overloaded") if cid == "b" and n == 1
                       else succeeded(cid, p, n), polls_before_end=1)
    requests = some_requests("a", "b")
    recorder = Recorder()

    with FakeBatchServer(fake) as server:
        model = AnthropicModel(MODEL_ID, api_key=KEY, base_url=server.url, max_retries=0)
        result = run(fake, requests, recorder, model=model)

    assert fake.created_ids() == [["a", "b"], ["b"]]
    assert result.results["b"]["content"][0]["text"] == "answer to b from batch 2"
    assert result.errors == {}
    assert ("GET", "/v1/messages/batches/msgbatch_fake_0002/results") in fake.calls
    assert all(h["host"] == f"127.0.0.1:{server.port}" for h in fake.headers)
