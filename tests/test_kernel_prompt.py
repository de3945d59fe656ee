"""The permission prompt in a real kernel that accepts input (as a notebook front end does): the person answers on
the kernel's stdin channel, and the answer decides. Driven with jupyter_client, the same protocol JupyterLab speaks."""

from __future__ import annotations

import queue
import shutil
from pathlib import Path

import pytest
from jupyter_client.manager import start_new_kernel

pytestmark = pytest.mark.needs_sandbox  # the kernel runs skill scripts
REPO = Path(__file__).resolve().parent.parent
TURNS = REPO / "notebooks" / "turns" / "permissions.yaml"
SETUP = """
%env SKILLS_MAGIC_SOURCES=bundled
%env SKILLS_MAGIC_DB=.skills/test.sqlite
%load_ext skills_magic
%skills add csv-profile
%skills model scripted turns.yaml
"""
RUN = "%%skill run\nProfile this CSV."


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    shutil.copytree(REPO / "sample-skills" / "csv-profile", tmp_path / "csv-profile")
    shutil.copy(TURNS, tmp_path / "turns.yaml")
    monkeypatch.chdir(tmp_path)
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def execute(client, code: str, answers: list[str] | None = None, timeout: float = 60) -> tuple[list[str], list[str], dict]:
    """Run code with stdin allowed; answer each input request in turn. Returns the prompts, text outputs, reply."""
    answers = list(answers or [])
    message_id = client.execute(code, allow_stdin=True)
    prompts: list[str] = []
    outputs: list[str] = []
    while True:
        try:
            request = client.get_stdin_msg(timeout=0.2)
        except queue.Empty:
            request = None
        if request is not None and request["msg_type"] == "input_request":
            prompts.append(request["content"]["prompt"])
            client.input(answers.pop(0) if answers else "")
        try:
            reply = client.get_shell_msg(timeout=0.2)
        except queue.Empty:
            continue
        if reply["parent_header"].get("msg_id") == message_id:
            break
    while True:  # everything the cell printed or displayed, up to the kernel going idle
        message = client.get_iopub_msg(timeout=timeout)
        if message["parent_header"].get("msg_id") != message_id:
            continue
        content = message["content"]
        if message["msg_type"] in ("execute_result", "display_data"):
            outputs.append(content["data"].get("text/plain", ""))
        elif message["msg_type"] == "stream":
            outputs.append(content["text"])
        elif message["msg_type"] == "error":
            outputs.append("\n".join(content["traceback"]))
        elif message["msg_type"] == "status" and content["execution_state"] == "idle":
            break
    return prompts, outputs, reply["content"]


def test_a_person_answering_once_lets_the_script_run(kernel):
    execute(kernel, SETUP)
    prompts, outputs, reply = execute(kernel, RUN, answers=["o"])
    assert reply["status"] == "ok"
    (prompt,) = prompts
    assert "skill csv-profile wants to run scripts/profile_csv.py" in prompt
    assert "sha256" in prompt and "stdin" in prompt and "[o]nce" in prompt
    text = "\n".join(outputs)
    assert "exit code 0" in text and "denied" not in text


def test_a_person_answering_deny_denies_and_the_run_goes_on(kernel):
    execute(kernel, SETUP)
    prompts, outputs, reply = execute(kernel, RUN, answers=["d"])
    assert len(prompts) == 1 and reply["status"] == "ok"
    text = "\n".join(outputs)
    assert "denied: the user: deny" in text and "stop: end_turn" in text


def test_always_is_remembered_for_the_session(kernel):
    execute(kernel, SETUP)
    first, _, _ = execute(kernel, RUN, answers=["a"])
    execute(kernel, "%skills model scripted turns.yaml")
    second, outputs, _ = execute(kernel, RUN)
    assert len(first) == 1 and second == []  # not asked again
    assert "exit code 0" in "\n".join(outputs)
    _, policy, _ = execute(kernel, "%skills policy")
    assert "allow csv-profile:scripts/profile_csv.py  [asked: always]" in "\n".join(policy)
