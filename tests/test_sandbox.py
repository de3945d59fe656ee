"""The bubblewrap sandbox, attacked: each script here would succeed without the sandbox, is refused inside it, and
succeeds again with the matching grant (so the grants are proven too). Skips without bwrap; CI installs it."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from processes import processes_running, wait_until_gone

from skills_magic.safety import sandbox
from skills_magic.skills.catalog import Source
from skills_magic.safety.gate import unattended
from skills_magic.session import SkillsSession
from notebook_setup import registered_magics
from skillfiles import script_skill

AVAILABLE, WHY = sandbox.availability()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=f"no bubblewrap sandbox here: {WHY}")


@pytest.fixture
def place(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("PRIVATE KEY\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def skill_with(place: Path, script: str, body: str) -> SkillsSession:
    script_skill(place / "skills", script, body)
    return SkillsSession(sources=[Source("session", str(place / "skills"), True)], cwd=str(place))


def run(session: SkillsSession, script: str, *args: str):
    return session.gate().run_script(session.skill("x"), f"scripts/{script}", list(args), "", unattended)


TCP = """import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5).sendall(b"hello")
    print("connected")
except OSError as error:
    print("refused:", error)
"""


@pytest.fixture
def server():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(10)
    received = []

    def accept():
        try:
            connection, _ = listener.accept()
            received.append(connection.recv(16))
            connection.close()
        except OSError:
            pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1], received
    listener.close()


def test_no_network_not_even_loopback_and_the_network_grant_opens_it(place, server):
    port, received = server
    session = skill_with(place, "tcp.py", TCP)
    session.add_rule("allow", "x:scripts/*")
    outcome = run(session, "tcp.py", str(port))
    assert outcome.run.stdout.startswith("refused:") and received == []
    session.add_rule("allow", "x:scripts/tcp.py", network=True)
    outcome = run(session, "tcp.py", str(port))
    assert outcome.run.stdout.strip() == "connected"


def test_host_names_do_not_resolve(place):
    session = skill_with(place, "dns.py", "import socket\ntry:\n    print(socket.getaddrinfo('localhost', 80)[0][4][0])\nexcept OSError as e:\n    print('no dns:', e)\n")
    session.add_rule("allow", "x:scripts/*")
    # the sandbox has no network namespace to speak of: name resolution that needs a resolver fails; localhost may
    # still come from /etc/hosts, so resolve a name that needs DNS
    session2 = skill_with(place, "dns2.py", "import socket\ntry:\n    socket.getaddrinfo('example.com', 80)\n    print('resolved')\nexcept OSError as e:\n    print('no dns:', e)\n")
    session2.add_rule("allow", "x:scripts/*")
    assert run(session2, "dns2.py").run.stdout.startswith("no dns:")


WRITE = """import sys
try:
    open(sys.argv[1], "w").write("x")
    print("wrote")
except OSError as error:
    print("refused:", error.strerror)
"""


def test_the_skills_own_folder_stays_read_only_even_under_a_write_grant(place):
    """A script runs from a private copy of its skill's files, mounted at the skill's folder: a grant for that folder
    does not let a script rewrite the skill (its next run would run other bytes)."""
    session = skill_with(place, "write.py", WRITE)
    target = place / "skills" / "x" / "result.txt"
    session.add_rule("allow", "x:scripts/write.py", writable=[str(target.parent)])
    assert run(session, "write.py", str(target)).run.stdout.startswith("refused:") and not target.exists()


def test_writes_outside_the_working_folder_are_refused_unless_granted(place):
    session = skill_with(place, "write.py", WRITE)
    outside = place.parent / f"{place.name}-outside"  # beside the session's folder, not in it
    outside.mkdir()
    target = outside / "result.txt"
    session.add_rule("allow", "x:scripts/*")
    assert run(session, "write.py", str(target)).run.stdout.startswith("refused:") and not target.exists()
    session.add_rule("allow", "x:scripts/write.py", writable=[str(outside)])
    assert run(session, "write.py", str(target)).run.stdout.strip() == "wrote" and target.exists()


def test_writes_in_the_working_folder_land_in_the_run_not_in_the_project(place):
    from skills_magic.safety.sandbox import overlay_availability

    if not overlay_availability()[0]:
        pytest.skip(overlay_availability()[1])
    session = skill_with(place, "write.py", WRITE)
    target = place / "result.txt"
    session.add_rule("allow", "x:scripts/*")
    result = run(session, "write.py", str(target)).run
    assert result.stdout.strip() == "wrote" and not target.exists()
    assert (Path(result.run_folder) / "changes" / "result.txt").read_text() == "x"
    session.add_rule("allow", "x:scripts/write.py", writable=[str(place)])  # a grant writes the project for real
    assert run(session, "write.py", str(target)).run.stdout.strip() == "wrote" and target.read_text() == "x"


def test_the_users_secrets_are_not_visible(place):
    session = skill_with(place, "peek.py", "import os\np = os.path.expanduser('~/.ssh/id_rsa')\nprint(open(p).read() if os.path.exists(p) else 'hidden')\n")
    (place / ".env").write_text("API_TOKEN=secret\n")
    session.add_rule("allow", "x:scripts/*")
    assert run(session, "peek.py").run.stdout.strip() == "hidden"
    env = skill_with(place, "dotenv.py", "try:\n    text = open(" + repr(str(place / ".env")) + ").read()\n"
                                         "except OSError:\n    text = ''\nprint('secret' in text)\n")
    env.add_rule("allow", "x:scripts/*")
    assert run(env, "dotenv.py").run.stdout.strip() == "False"  # the project's .env reads as nothing


DAEMON = """import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        while True:
            time.sleep(0.05)
    os._exit(0)
print("parent exits")
"""


def test_a_daemon_that_outlives_its_parent_dies_with_the_run(place):
    session = skill_with(place, "daemon.py", DAEMON)
    session.add_rule("allow", "x:scripts/*")
    outcome = run(session, "daemon.py")
    assert outcome.run.stdout.strip() == "parent exits" and outcome.run.exit_code == 0
    alive = processes_running(str(place / "skills" / "x" / "scripts" / "daemon.py"))
    for pid in alive:  # bounded: the PID namespace is torn down when the run's first process exits
        wait_until_gone(pid)
    alive = processes_running(str(place / "skills" / "x" / "scripts" / "daemon.py"))
    assert not alive, f"the daemon survived the run: {alive}"


def test_filling_the_scratch_folder_past_its_cap_is_stopped_with_a_clear_error(place):
    session = skill_with(place, "fill.py", "import os\nwith open(os.path.join(os.environ['SKILLS_MAGIC_OUTPUT'], 'big'), 'wb') as f:\n"
                                          "    while True:\n        f.write(b'x' * 65536)\n        f.flush()\n")
    session.add_rule("allow", "x:scripts/*")
    gate = session.gate()
    gate.scratch_cap = 1024 * 1024
    outcome = gate.run_script(session.skill("x"), "scripts/fill.py", [], "", unattended)
    assert outcome.run.stopped == ("stopped: write limit 1 MiB reached (everything the run writes together); "
                                   "allow more with --max-writes 4M")


def test_outputs_in_the_scratch_folder_are_listed_and_kept(place):
    session = skill_with(place, "report.py", "import os\nopen(os.path.join(os.environ['SKILLS_MAGIC_OUTPUT'], 'report.txt'), 'w').write('done')\nprint('ok')\n")
    session.add_rule("allow", "x:scripts/*")
    result = session.run_script("x", "scripts/report.py")
    assert [(o["path"], o["bytes"]) for o in result.outputs] == [("report.txt", 4)]
    assert Path(result.outputs[0]["file"]).read_text() == "done"
    assert Path(result.outputs[0]["file"]).is_relative_to(place / ".skills" / "runs")


@pytest.mark.sandbox_fallback
def test_without_a_sandbox_a_run_is_refused_unless_a_rule_allows_it_unsandboxed(place, monkeypatch):
    monkeypatch.setattr(sandbox, "availability", lambda: (False, "bwrap is not installed; install bubblewrap"))
    session = skill_with(place, "hi.py", "print('hi')\n")
    session.add_rule("allow", "x:scripts/*")
    outcome = run(session, "hi.py")
    assert outcome.run is None and "no sandbox" in outcome.error and "--unsandboxed" in outcome.error
    assert "install bubblewrap" in outcome.error
    session.add_rule("allow", "x:scripts/hi.py", unsandboxed=True)
    outcome = run(session, "hi.py")
    assert outcome.run.stdout == "hi\n" and outcome.run.sandboxed is False


def test_a_policy_file_cannot_allow_unsandboxed_runs(place):
    from skills_magic.safety.policy import Policy

    (place / "skills-policy.yaml").write_text("allow:\n  - {rule: 'x:scripts/*', unsandboxed: true}\n")
    policy = Policy()
    policy.load_file(str(place / "skills-policy.yaml"))
    policy.trust_file(str(place / "skills-policy.yaml"))  # even trusted: the rule stays, `unsandboxed` is dropped
    assert [r.unsandboxed for r in policy.rules] == [False] and any("unsandboxed" in p for p in policy.problems)
    assert not policy.grants("x", "scripts/run.py").unsandboxed


def test_policy_shows_the_sandbox_mode_and_the_grants(place, ip):
    skill_with(place, "hi.py", "print('hi')\n")
    with registered_magics(ip):
        ip.run_line_magic("skills", f"add {place / 'skills'}")
        ip.run_line_magic("skills", f"allow x:scripts/* --network --write {place}")
        text = ip.run_line_magic("skills", "policy").text()
    assert "sandbox: bubblewrap" in text and "network" in text and f"write: {place}" in text


@pytest.mark.sandbox_fallback
def test_without_overlayfs_the_working_folder_is_read_only_and_policy_and_the_hint_say_how_to_enable_it(place, monkeypatch, ip):
    reason = ("read-only in runs: no overlayfs in a user namespace here (mount: permission denied); a Linux kernel "
              "5.11 or newer with unprivileged overlayfs makes it copy-on-write")
    monkeypatch.setattr(sandbox, "overlay_availability", lambda: (False, reason))
    session = skill_with(place, "write.py", WRITE)
    session.add_rule("allow", "x:scripts/*")
    result = run(session, "write.py", str(place / "result.txt")).run
    assert result.stdout.startswith("refused:") and not (place / "result.txt").exists() and result.working_folder is None
    with registered_magics(ip):
        ip.run_line_magic("skills", f"add {place / 'skills'}")
        text = ip.run_line_magic("skills", "policy").text()
    assert f"working folder: {reason}" in text
    failing = skill_with(place, "crash.py", "open('result.txt', 'w').write('x')\n")
    failing.add_rule("allow", "x:scripts/*")
    crashed = run(failing, "crash.py").run
    assert crashed.exit_code == 1 and crashed.hint == (
        f"hint: the working folder is {reason}; to let it write there for real: "
        f"%skills allow x:scripts/crash.py --write {place}")


def test_a_notebook_inside_its_skills_folder_still_runs_from_the_private_copy_and_writes_copy_on_write(tmp_path, monkeypatch):
    """Prototyping a skill with the notebook in its own folder: the copy must not hide the working folder."""
    from skills_magic.safety.sandbox import overlay_availability

    folder = script_skill(tmp_path, "out.py", "import os\nopen('result.txt', 'w').write('x')\nprint(os.getcwd())\n")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(folder)
    session = SkillsSession(sources=[Source("session", str(folder), True)], cwd=str(folder))
    session.add_rule("allow", "x:scripts/*")
    result = session.run_script("x", "scripts/out.py")
    assert result.stop_reason == "no_model", result.error
    assert result.final_text.strip() == str(folder) and not (folder / "result.txt").exists()
    if overlay_availability()[0]:
        assert [c.path for c in result.changes] == ["result.txt"]
    assert not list(folder.glob(".skills/runs/*/changes/.skills"))  # the run's own folder is never a change


def test_python_dash_m_finds_the_skills_scripts_in_an_inline_command_and_a_script_imports_its_siblings(place):
    session = skill_with(place, "helper.py", "VALUE = 'from the skill'\n")
    folder = Path(session.skill("x").folder)
    (folder / "scripts" / "report.py").write_text("from scripts.helper import VALUE\nprint(VALUE)\n")
    session.add_rule("allow", "x:scripts/*")
    session.add_rule("allow", "x:!python -m scripts.report")
    assert session.run_script("x", "scripts/report.py").final_text == "from the skill\n"
    gate = session.gate()
    assert gate.expand_inline(session.skill("x"), "python -m scripts.report", unattended).run.stdout == "from the skill\n"
