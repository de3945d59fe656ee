"""A script's environment is an allowlist, and credentials are masked wherever a script's output is stored.

Real child processes print their whole environment: credentials the kernel holds (DATABASE_URL, MYSQL_PWD, proxy and
index URLs with passwords, SENTRY_DSN, a Slack webhook) never reach them unless a rule grants them by name. `redact`
masks environment secrets and credential shapes in text; `--record` cassettes and audit rows store them masked.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from database_files import raw_rows
from notebook_setup import notebook_folder
from skillfiles import make_skill, write_file
from skills_magic import redact
from skills_magic.safety import sandbox
from skills_magic.skills.catalog import Source
from skills_magic.safety.execute import clean_environment, run_script
from skills_magic.safety.gate import unattended
from skills_magic.models.replay import RecordingModel
from skills_magic.models.scripted import ScriptedModel
from skills_magic.session import SkillsSession

SANDBOX, WHY_NOT = sandbox.availability()
ENV_DUMP = "import json, os\nprint(json.dumps(dict(os.environ)))\n"
CREDENTIALS = {  # what a kernel often holds; distinctive values, so none can appear in an output by chance
    "DATABASE_URL": "postgres://dbuser:dbpass-9c1d@db.internal:5432/app",
    "MYSQL_PWD": "mysql-pwd-9c1d",
    "HTTPS_PROXY": "http://user:pass-9c1d@proxy:3128",
    "PIP_INDEX_URL": "https://u:tok-9c1d@pypi.example/simple",
    "SENTRY_DSN": "https://key9c1d0123@o42.ingest.sentry.io/77",
    "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T09C1D/B09C1D/hook9c1dsecret",
    "FOO_BAR": "foo-bar-9c1d",  # not a secret at all: it is simply not on the allowlist
}
MEGABYTE = 1024 * 1024  # the most a script's stream keeps (execute.MAX_OUTPUT_BYTES)
ANTHROPIC_KEY = "sk-ant-api03-key-9c1d-0123456789"
SHAPES = (  # (text holding a credential, the same text as stored)
    ("postgres://dbuser:s3cr3t@db:5432/app", "postgres://dbuser:***@db:5432/app"),
    ("proxy http://user:pass@proxy:3128 set", "proxy http://user:***@proxy:3128 set"),
    ("redis://:onlypassword@cache:6379/0", "redis://:***@cache:6379/0"),
    ("--index-url https://u:tok@pypi.example/simple", "--index-url https://u:***@pypi.example/simple"),
    ("https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXX", "https://hooks.slack.com/services/***"),
    ("https://discord.com/api/webhooks/123456/abcDEF-ghi_jkl", "https://discord.com/api/webhooks/***"),
    ("key=sk-ant-api03-AbCdEfGhIjKlMnOp_qr-st", "key=***"),
    ("OPENAI=sk-proj-abcdefghijklmnopqrstuvwx", "OPENAI=***"),
    ("token ghp_0123456789abcdefghijABCDEFGHIJ012345.", "token ***."),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "***"),
    ('"xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOp"', '"***"'),
    ("aws_access_key_id = AKIAIOSFODNN7EXAMPLE", "aws_access_key_id = ***"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\nnext",
     "-----BEGIN RSA PRIVATE KEY-----***\nnext"),
)
ORDINARY = (  # credential-like at a glance, but not credentials: stored as they are
    "http://localhost:8888/lab?token=",  # the word token, no value
    "https://example.com:8443/path@v2",  # a port, not a password
    "mail jane@example.com or see user:pass in the docs",  # no scheme://
    "task-force-abcdefghijklmnopqrstuvwxyz0123 and scikit-learn",  # 'sk-' inside a word
    "AKIA is four letters; AKIAIOSFODNN7EXAMPLEXTRA is longer than a key id",
    "wayland ubuntu /home/me/project Jane Doe default us-east-1",
)


@pytest.fixture
def credentials(monkeypatch):
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LANG", "C.UTF-8")
    return CREDENTIALS


def assert_none_of(credentials: dict[str, str], text: str, seen: dict[str, str]) -> None:
    assert not set(credentials) & set(seen), f"names reached the script: {set(credentials) & set(seen)}"
    leaked = [v for v in credentials.values() if v in text]
    assert not leaked, f"values reached the script: {leaked}"
    for part in ("dbpass-9c1d", "pass-9c1d", "tok-9c1d", "hook9c1dsecret", "key9c1d0123"):
        assert part not in text


def skill_with(place: Path, scripts: dict[str, str]) -> SkillsSession:
    folder = place / "skills" / "x"
    make_skill(folder, name="x")
    for relative, text in scripts.items():
        write_file(folder, relative, text)
    return SkillsSession(sources=[Source("session", str(place / "skills"), True)], cwd=str(place))


@pytest.fixture
def place(tmp_path, monkeypatch) -> Path:
    return notebook_folder(monkeypatch, tmp_path)


# --- the environment is an allowlist ------------------------------------------------------------------------------


def test_a_script_sees_only_the_allowlist_of_the_kernels_environment(tmp_path, credentials, monkeypatch):
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.setenv("SKILLS_MAGIC_SOURCES", "bundled")
    write_file(tmp_path, "env.py", ENV_DUMP)

    run = run_script(str(tmp_path), "env.py")

    seen = json.loads(run.stdout)
    assert_none_of(credentials, run.stdout, seen)
    assert seen["PATH"] == os.environ["PATH"] and seen["HOME"] == os.environ["HOME"] and seen["LANG"] == "C.UTF-8"
    assert seen["LC_ALL"] == "C.UTF-8" and seen["SKILLS_MAGIC_SOURCES"] == "bundled"


def test_a_granted_variable_reaches_the_script_even_when_it_looks_secret(tmp_path, credentials):
    write_file(tmp_path, "env.py", ENV_DUMP)

    seen = json.loads(run_script(str(tmp_path), "env.py", granted_env=("DATABASE_URL", "FOO_BAR")).stdout)

    assert seen["DATABASE_URL"] == credentials["DATABASE_URL"] and seen["FOO_BAR"] == credentials["FOO_BAR"]
    assert not {"MYSQL_PWD", "HTTPS_PROXY", "PIP_INDEX_URL", "SENTRY_DSN", "SLACK_WEBHOOK_URL"} & set(seen)


@pytest.mark.skipif(not SANDBOX, reason=f"no bubblewrap sandbox here: {WHY_NOT}")
def test_a_sandboxed_run_through_the_gate_sees_only_the_allowlist_and_its_grant(place, credentials):
    session = skill_with(place, {"scripts/env.py": ENV_DUMP})
    session.add_rule("allow", "x:scripts/*", env=["FOO_BAR"])

    outcome = session.gate().run_script(session.skill("x"), "scripts/env.py", [], "", unattended)

    assert outcome.allowed and outcome.run is not None and outcome.run.sandboxed, outcome
    seen = json.loads(outcome.run.stdout)
    assert seen["FOO_BAR"] == credentials["FOO_BAR"]
    assert_none_of({k: v for k, v in credentials.items() if k != "FOO_BAR"}, outcome.run.stdout, seen)
    assert seen["PATH"] == os.environ["PATH"] and seen["LANG"] == "C.UTF-8" and "HOME" in seen


def test_allowlisted_names_are_dropped_when_they_look_like_credentials():
    environ = {"PATH": "/bin", "HOME": "/h", "LC_CTYPE": "C.UTF-8", "TERM": "xterm", "TZ": "UTC",
               "SKILLS_MAGIC_SOURCES": "bundled", "SKILLS_MAGIC_API_TOKEN": "t",  # named like a credential
               "SKILLS_MAGIC_INDEX": "https://u:pw@index.example/",  # shaped like one
               "LANG": "sk-ant-api03-0123456789abcdef",  # an allowlisted name holding a token
               "PYTHONPATH": "/src", "EDITOR": "vim", "HTTP_PROXY": "http://proxy:3128", "GITHUB_TOKEN": "ghp_x"}

    assert clean_environment(environ) == {"PATH": "/bin", "HOME": "/h", "LC_CTYPE": "C.UTF-8", "TERM": "xterm",
                                          "TZ": "UTC", "SKILLS_MAGIC_SOURCES": "bundled"}
    assert clean_environment(environ, ["GITHUB_TOKEN", "SKILLS_MAGIC_API_TOKEN", "NOT_SET"])["GITHUB_TOKEN"] == "ghp_x"
    assert "SKILLS_MAGIC_API_TOKEN" in clean_environment(environ, ["SKILLS_MAGIC_API_TOKEN"])


# --- masking ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, stored", SHAPES, ids=[s[0][:24] for s in SHAPES])
def test_mask_hides_each_credential_shape_from_anywhere(text, stored):
    assert redact.mask(text, environ={}) == stored


@pytest.mark.parametrize("text", ORDINARY)
def test_mask_leaves_ordinary_text_alone(text):
    assert redact.mask(text, environ={"PWD": "/home/me/project", "JPY_SESSION_NAME": "/home/me/project",
                                      "XDG_SESSION_TYPE": "wayland",
                                      "DESKTOP_SESSION": "ubuntu", "GIT_AUTHOR_NAME": "Jane Doe",
                                      "AWS_PROFILE": "default", "AWS_REGION": "us-east-1", "DEBUG_TOKEN": "1"}) == text


def test_mask_hides_secret_environment_values_wherever_they_occur(credentials):
    environ = {**credentials, "MY_SERVICE_TOKEN": "svc-9c1d-token", "PWD": "/home/me/project", "SHORT_KEY": "abc",
               "SMTP_PASS": "smtp-pass-9c1d"}
    text = ("connecting with svc-9c1d-token...\n" + json.dumps(environ) + "\npassword was mysql-pwd-9c1d; "
            "the index token printed alone: tok-9c1d, key abc, cwd /home/me/project\n")

    masked = redact.mask(text, environ)

    for value in ("svc-9c1d-token", "smtp-pass-9c1d", "mysql-pwd-9c1d", "dbpass-9c1d", "pass-9c1d", "tok-9c1d",
                  "hook9c1dsecret", "key9c1d0123"):
        assert value not in masked, value
    assert "connecting with ***..." in masked and "password was ***;" in masked
    assert "postgres://dbuser:***@db.internal:5432/app" in masked  # the URL stays readable, its password does not
    assert '"SENTRY_DSN": "***"' in masked and '"SLACK_WEBHOOK_URL": "***"' in masked
    assert "printed alone: ***, key abc, cwd /home/me/project" in masked  # a URL's password alone too; not PWD
    assert redact.mask(text, environ) == masked and redact.mask(masked, environ) == masked  # stable, idempotent


def test_mask_uses_the_kernels_environment_by_default(monkeypatch):
    monkeypatch.setenv("ACME_API_KEY", "acme-key-9c1d-value")
    assert redact.mask("got acme-key-9c1d-value back") == "got *** back"
    monkeypatch.setenv("ACME_API_KEY", "acme-key-9c1d-other")  # a changed environment is seen at once
    assert redact.mask("acme-key-9c1d-other; acme-key-9c1d-value") == "***; acme-key-9c1d-value"


def test_mask_never_raises_on_odd_text():
    environ = {"ODD_TOKEN": "bad\udcff\x00token"}
    assert redact.mask("lone \ud800 surrogate\x00NUL bad\udcff\x00token https://u:p\udcff@h/", environ) == \
        "lone \ud800 surrogate\x00NUL *** https://u:***@h/"
    assert redact.mask("", environ) == ""
    assert redact.mask(None, environ) is None and redact.mask(42, environ) == 42 and redact.mask(b"x", environ) == b"x"
    assert redact.mask("-----BEGIN PRIVATE KEY-----\nMIIE... (the output was cut here)", environ) == \
        "-----BEGIN PRIVATE KEY-----***"
    assert redact.mask_data({"a": ["postgres://u:pw@h/db", 1, None, {"b": ("sk-ant-api03-abcdefghij",)}]}, environ) == \
        {"a": ["postgres://u:***@h/db", 1, None, {"b": ("***",)}]}


def test_masking_a_megabyte_of_output_is_quick(credentials):
    line = "The quick brown fox read https://example.com/a?x=1 at 12:30, task-force sk-learn AKIA 42\n"
    output = (line * (MEGABYTE // len(line) + 1))[:MEGABYTE]
    secrets = " mysql-pwd-9c1d postgres://u:pw@h/db ghp_0123456789abcdefghijABCDEFGHIJ012345 "
    output = output[:500_000] + secrets + output[500_000:]
    masker = redact.redactor()
    masker.mask("warm up")
    started = time.perf_counter()
    masked = masker.mask(output)
    elapsed = time.perf_counter() - started
    assert "mysql-pwd-9c1d" not in masked and "u:***@h" in masked and "ghp_0123" not in masked
    assert elapsed < 0.5, f"masking 1 MB took {elapsed:.3f} s"  # about 20 ms on a laptop


# --- where outputs are stored: cassettes and the audit ------------------------------------------------------------


PRINTS_CREDENTIALS = """\
import os
print("config: postgres://app:cfg-pass-9c1d@db/app")
print("webhook: https://hooks.slack.com/services/T1/B2/cfg9c1dhook")
print("token: ghp_9c1d0123456789abcdefghijABCDEFGHIJ")
print("granted:", os.environ.get("MYSQL_PWD"))
"""


def test_a_recorded_cassette_stores_tool_results_and_task_masked_and_replays(place, credentials, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    session = skill_with(place, {"scripts/show.py": PRINTS_CREDENTIALS})
    session.add_rule("allow", "x:scripts/*", env=["MYSQL_PWD"], unsandboxed=not SANDBOX)
    call = {"name": "run_skill_script", "input": {"skill": "x", "path": "scripts/show.py", "args": [], "stdin": ""}}
    session.model_client = ScriptedModel([{"tool_use": [call]}, "done: the proxy is http://user:pass-9c1d@proxy:3128"])
    task = f"Check the config (my key, pasted by mistake: {ANTHROPIC_KEY}; the db: {credentials['DATABASE_URL']})."

    result = session.run(task, record="run.json")

    assert result.ok, result.error
    text = (place / "run.json").read_text(encoding="utf-8")
    for secret in (ANTHROPIC_KEY, "dbpass-9c1d", "cfg-pass-9c1d", "cfg9c1dhook", "ghp_9c1d", "mysql-pwd-9c1d",
                   "pass-9c1d"):
        assert secret not in text, secret
    cassette = json.loads(text)
    tool_result = cassette["exchanges"][1]["request"]["messages"][2]["content"][0]
    assert tool_result["type"] == "tool_result"
    assert "postgres://app:***@db/app" in tool_result["content"]
    assert "https://hooks.slack.com/services/***" in tool_result["content"]
    assert "granted: ***" in tool_result["content"]  # masked by the gate before the cassette saw it
    assert "[redacted:ANTHROPIC_API_KEY]" in json.dumps(cassette["exchanges"][0]["request"])
    assert cassette["exchanges"][1]["response"]["content"][0]["text"] == "done: the proxy is http://user:***@proxy:3128"

    again = skill_with(place, {})
    again.add_rule("allow", "x:scripts/*", env=["MYSQL_PWD"], unsandboxed=not SANDBOX)
    replayed = again.run(task, replay="run.json")  # masked the same way when compared: the replay matches
    assert replayed.ok and replayed.error is None, replayed.error


def test_recording_masks_every_string_of_requests_and_responses(tmp_path, credentials):
    answer = "see https://discord.com/api/webhooks/1/abc9c1d and mysql-pwd-9c1d"
    model = RecordingModel(ScriptedModel([answer]), tmp_path / "c.json")
    request = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": json.dumps(credentials)}]}]}

    model.create(request)

    text = (tmp_path / "c.json").read_text(encoding="utf-8")
    for value in ("dbpass-9c1d", "mysql-pwd-9c1d", "pass-9c1d", "tok-9c1d", "key9c1d0123", "hook9c1dsecret", "abc9c1d"):
        assert value not in text, value
    assert "foo-bar-9c1d" in text  # not a secret: only kept from scripts, not masked
    assert "[redacted:MYSQL_PWD]" in text and "https://discord.com/api/webhooks/***" in text


def test_the_shipped_cassette_is_unchanged_by_masking():
    path = Path(__file__).resolve().parent.parent / "notebooks" / "cassettes" / "weather.json"
    if not path.is_file():
        pytest.skip(f"{path} is not in this checkout")
    cassette = json.loads(path.read_text(encoding="utf-8"))
    assert redact.mask_data(cassette["exchanges"], environ={}) == cassette["exchanges"]  # its replay still matches


def test_audit_rows_store_credentials_masked(place, credentials):
    session = skill_with(place, {"scripts/run.py": "print('ran')\n"})
    gate = session.gate()
    command = f"curl -u x {credentials['PIP_INDEX_URL']} --password mysql-pwd-9c1d"

    gate.run_check("ledger", command, str(place), unattended)  # nobody to ask: denied, with the command in the row
    gate.run_script(session.skill("x"), "scripts/https://u:pw-9c1d@h.py", [], "", unattended)  # not a file

    rows = raw_rows(place / "audit.sqlite")
    assert len(rows) >= 2
    stored = json.dumps(rows)
    for secret in ("tok-9c1d", "mysql-pwd-9c1d", "pw-9c1d"):
        assert secret not in stored, secret
    assert rows[0]["path"] == "!curl -u x https://u:***@pypi.example/simple --password ***"
    assert "u:***@h.py" in rows[-1]["path"] or "u:***@h.py" in (rows[-1]["detail"] or "")
    assert [r["session"] for r in rows] == [session.session_id] * len(rows)
