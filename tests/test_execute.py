"""Running a skill's script: real child processes, no shell, the skill folder as cwd, no secrets in the environment,
bounded in time (the whole process group is killed) and in output."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import sys
from pathlib import Path

import pytest
from processes import gone, wait_until_gone
from skillfiles import write_file

import skills_magic.safety.execute as execute
from skills_magic.safety.execute import ScriptError, clean_environment, run_script


@pytest.fixture
def skill(tmp_path) -> Path:
    folder = tmp_path / "skills" / "demo"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: demo\ndescription: D.\n---\nbody\n")
    return folder


ECHO = """\
import json, os, sys
data = sys.stdin.read()
print(json.dumps({"argv": sys.argv[1:], "stdin": data, "cwd": os.getcwd(), "executable": sys.executable}))
"""


# --- .py scripts -------------------------------------------------------------------------------------------------


def test_python_script_runs_with_the_kernels_python_in_the_skill_folder(skill):
    write_file(skill, "scripts/echo.py", ECHO)
    run = run_script(str(skill), "scripts/echo.py", ["a", "b c"], stdin="hello\u00e9\n")
    assert run.exit_code == 0
    assert not run.timed_out and not run.truncated
    seen = json.loads(run.stdout)
    assert seen["argv"] == ["a", "b c"]
    assert seen["stdin"] == "hello\u00e9\n"
    assert seen["cwd"] == os.path.realpath(skill)
    assert os.path.realpath(seen["executable"]) == os.path.realpath(sys.executable)
    assert run.stderr == ""
    assert run.script == "scripts/echo.py"
    assert run.arguments == ("a", "b c")
    assert run.stdin_bytes == len("hello\u00e9\n".encode("utf-8"))
    assert run.seconds >= 0


def test_python_script_needs_no_executable_bit(skill):
    write_file(skill, "run.py", "print('ran')\n", mode=0o644)
    assert run_script(str(skill), "run.py").stdout == "ran\n"


def test_arguments_are_stringified(skill):
    write_file(skill, "echo.py", ECHO)
    run = run_script(str(skill), "echo.py", [1, 2.5])
    assert json.loads(run.stdout)["argv"] == ["1", "2.5"]


def test_a_failing_script_reports_exit_code_and_stderr(skill):
    write_file(skill, "fail.py", "import sys\nprint('partial')\nsys.stderr.write('it broke\\n')\nsys.exit(3)\n")
    run = run_script(str(skill), "fail.py")
    assert run.exit_code == 3
    assert run.stdout == "partial\n"
    assert run.stderr == "it broke\n"
    assert not run.timed_out


def test_an_exception_gives_a_traceback_on_stderr(skill):
    write_file(skill, "boom.py", "raise ValueError('nope')\n")
    run = run_script(str(skill), "boom.py")
    assert run.exit_code == 1
    assert "ValueError: nope" in run.stderr


def test_no_stdin_means_empty_stdin(skill):
    write_file(skill, "echo.py", ECHO)
    run = run_script(str(skill), "echo.py")
    assert json.loads(run.stdout)["stdin"] == ""
    assert run.stdin_bytes == 0


def test_sha256_of_the_script_bytes(skill):
    script = write_file(skill, "scripts/hash.py", "print('x')  # \u00e9\n")
    run = run_script(str(skill), "scripts/hash.py")
    assert run.sha256 == hashlib.sha256(script.read_bytes()).hexdigest()
    script.write_text("print('y')\n")
    assert run_script(str(skill), "scripts/hash.py").sha256 == hashlib.sha256(b"print('y')\n").hexdigest()


# --- the environment ---------------------------------------------------------------------------------------------

ENV = "import json, os\nprint(json.dumps(dict(os.environ)))\n"
SECRETS = {  # distinctive values, so none can appear in the output by chance
    "ANTHROPIC_API_KEY": "sk-ant-secret-0f1e",
    "ANTHROPIC_BASE_URL": "http://localhost:1/secret-0f1e",
    "GITHUB_TOKEN": "ghp-secret-0f1e",
    "HF_TOKEN": "hf-secret-0f1e",
    "MY_SERVICE_SECRET": "service-secret-0f1e",
    "AWS_ACCESS_KEY_ID": "AKIA-secret-0f1e",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-0f1e",
    "AWS_REGION": "region-secret-0f1e",
    "OPENAI_API_KEY": "sk-openai-secret-0f1e",
    "DB_PASSWORD": "password-secret-0f1e",
}


def test_environment_has_no_secrets_but_keeps_path(skill, monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SKILLS_TEST_PLAIN", "kept")
    write_file(skill, "env.py", ENV)
    run = run_script(str(skill), "env.py")
    env = json.loads(run.stdout)
    for name in SECRETS:
        assert name not in env
    assert not any(name.startswith("AWS_") or name.endswith(("_TOKEN", "_SECRET")) for name in env)
    assert env["PATH"] == os.environ["PATH"]
    assert "SKILLS_TEST_PLAIN" not in env  # not on the allowlist: only a rule's --env grant passes it
    assert "secret-0f1e" not in run.stdout


def test_explicit_environment_is_cleaned_too(skill):
    write_file(skill, "env.py", ENV)
    environ = {"PATH": os.environ["PATH"], "ANTHROPIC_API_KEY": "k", "X_TOKEN": "t", "PLAIN": "p"}
    env = json.loads(run_script(str(skill), "env.py", environ=environ, granted_env=("PLAIN",)).stdout)
    assert "ANTHROPIC_API_KEY" not in env and "X_TOKEN" not in env
    assert env["PLAIN"] == "p"  # granted by name
    assert env["PATH"] == os.environ["PATH"]


def test_clean_environment():
    environ = {"PATH": "/bin", "HOME": "/h", "LANG": "C.UTF-8", **SECRETS, "gh_token": "x", "GH_HOST": "h",
               "AZURE_X": "a", "GOOGLE_APPLICATION_CREDENTIALS": "g", "SESSION_COOKIE": "c"}
    cleaned = clean_environment(environ)
    assert cleaned == {"PATH": "/bin", "HOME": "/h", "LANG": "C.UTF-8"}
    assert environ["ANTHROPIC_API_KEY"] == SECRETS["ANTHROPIC_API_KEY"]  # the input is not modified


# --- time and output bounds --------------------------------------------------------------------------------------


SLEEPER = """\
import os, sys, time
pid = os.fork()
if pid == 0:
    # the grandchild lets go of the pipes: only killing the whole group can stop it
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    time.sleep(120)
    os._exit(0)
with open(sys.argv[1], "w") as handle:
    handle.write(str(pid))
print("started", flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs os.pidfd_open (Linux)")
def test_timeout_kills_the_script_and_its_children(skill, tmp_path):
    write_file(skill, "slow.py", SLEEPER)
    pid_file = tmp_path / "grandchild.pid"
    run = run_script(str(skill), "slow.py", [str(pid_file)], timeout=0.5)
    assert run.timed_out
    assert run.exit_code is None
    assert run.stdout == "started\n"
    grandchild = int(pid_file.read_text())
    try:
        assert wait_until_gone(grandchild), f"the script's child {grandchild} survived the timeout"
    finally:
        if not gone(grandchild):
            os.kill(grandchild, signal.SIGKILL)


def test_output_over_the_limit_is_cut_and_says_so(skill, monkeypatch):
    monkeypatch.setattr(execute, "MAX_OUTPUT_BYTES", 100)
    write_file(skill, "loud.py", "import sys\nsys.stdout.write('a' * 5000)\nsys.stderr.write('e' * 50)\n")
    run = run_script(str(skill), "loud.py")
    assert run.exit_code == 0
    assert run.truncated
    assert run.stdout == "a" * 100 + "\n[output cut: 4,900 more bytes not shown]"
    assert run.stderr == "e" * 50


def test_stderr_over_the_limit_is_cut_too(skill, monkeypatch):
    monkeypatch.setattr(execute, "MAX_OUTPUT_BYTES", 10)
    write_file(skill, "loud.py", "import sys\nsys.stderr.write('e' * 11)\nprint('ok')\n")
    run = run_script(str(skill), "loud.py")
    assert run.truncated
    assert run.stderr == "e" * 10 + "\n[output cut: 1 more bytes not shown]"
    assert run.stdout == "ok\n"


def test_output_exactly_at_the_limit_is_not_cut(skill, monkeypatch):
    monkeypatch.setattr(execute, "MAX_OUTPUT_BYTES", 100)
    write_file(skill, "exact.py", "import sys\nsys.stdout.write('a' * 100)\n")
    run = run_script(str(skill), "exact.py")
    assert not run.truncated
    assert run.stdout == "a" * 100


def test_large_stdin_and_output_do_not_deadlock(skill):
    write_file(skill, "cat.py", "import sys\nsys.stdout.write(sys.stdin.read())\n")
    data = "x" * (1024 * 512)
    run = run_script(str(skill), "cat.py", stdin=data)
    assert run.stdout == data
    assert run.stdin_bytes == len(data)


# --- what can be started -----------------------------------------------------------------------------------------


def test_paths_outside_the_folder_are_refused(skill, tmp_path):
    write_file(tmp_path, "outside.py", "print('escaped')\n")
    (skill / "link.py").symlink_to(tmp_path / "outside.py")
    for path in ("../../outside.py", str(tmp_path / "outside.py"), "link.py", "scripts/../../../outside.py"):
        with pytest.raises(ScriptError, match="outside the skill's folder"):
            run_script(str(skill), path)


def test_an_absolute_path_inside_the_folder_is_refused(skill):
    write_file(skill, "ok.py", "print(1)\n")
    with pytest.raises(ScriptError, match="outside the skill's folder"):
        run_script(str(skill), str(skill / "ok.py"))


def test_a_sibling_folder_with_the_same_prefix_is_outside(skill):
    write_file(skill.parent / "demo-evil", "x.py", "print(1)\n")
    with pytest.raises(ScriptError, match="outside"):
        run_script(str(skill), "../demo-evil/x.py")


@pytest.mark.parametrize("path", ["", "  ", None, 5])
def test_a_path_must_be_a_nonempty_string(skill, path):
    with pytest.raises(ScriptError, match="must be a script path"):
        run_script(str(skill), path)


def test_missing_file_and_folder_are_refused(skill):
    (skill / "scripts").mkdir()
    with pytest.raises(ScriptError, match="not a file"):
        run_script(str(skill), "scripts/missing.py")
    with pytest.raises(ScriptError, match="not a file"):
        run_script(str(skill), "scripts")


def test_a_non_executable_file_that_is_not_py_or_sh_is_refused(skill):
    write_file(skill, "scripts/run.pl", "print 'hi'\n", mode=0o644)
    with pytest.raises(ScriptError, match="run.pl is not a .py or .sh file and has no run bit"):
        run_script(str(skill), "scripts/run.pl")


def test_a_sh_script_runs_with_bash_without_its_run_bit(skill):
    write_file(skill, "scripts/run.sh", "echo \"hi from ${BASH_VERSION%%.*}\"\n", mode=0o644)
    run = run_script(str(skill), "scripts/run.sh")
    assert run.exit_code == 0 and run.stdout.startswith("hi from ")


def test_an_executable_script_runs_without_a_shell(skill, tmp_path):
    marker = tmp_path / "pwned"
    write_file(skill, "scripts/args.sh", '#!/bin/sh\nfor a in "$@"; do printf "[%s]\\n" "$a"; done\npwd\n', mode=0o755)
    arguments = ["a b", f"x; touch {marker}", "$(id)", "`id`", "*", "'q'", ""]
    run = run_script(str(skill), "scripts/args.sh", arguments)
    assert run.exit_code == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[:-1] == [f"[{a}]" for a in arguments]
    assert lines[-1] == os.path.realpath(skill)
    assert not marker.exists()


def test_an_executable_without_a_shebang_is_not_handed_to_a_shell(skill):
    # exec of a text file without `#!` fails (ENOEXEC) instead of falling back to /bin/sh as a shell would
    write_file(skill, "noshebang", "echo ran\n", mode=0o755)
    with pytest.raises(ScriptError, match="cannot be started"):
        run_script(str(skill), "noshebang")


def test_a_missing_interpreter_is_a_clear_error(skill):
    write_file(skill, "tool", "#!/usr/bin/no-such-interpreter\nprint(1)\n", mode=0o755)
    with pytest.raises(ScriptError, match="tool cannot be started"):
        run_script(str(skill), "tool")


def test_an_executable_with_a_shebang_and_a_symlink_to_it_run(skill):
    # a symlink inside the folder to another file inside the folder is fine
    script = write_file(skill, "bin/tool", f"#!{sys.executable}\nimport sys\nprint('tool', sys.argv[1:])\n", mode=0o755)
    assert stat.S_IMODE(script.stat().st_mode) & 0o100
    (skill / "tool-link").symlink_to(script)
    assert run_script(str(skill), "bin/tool", ["1"]).stdout == "tool ['1']\n"
    assert run_script(str(skill), "tool-link", ["2"]).stdout == "tool ['2']\n"


def test_keyboard_interrupt_kills_the_script_and_propagates(skill, monkeypatch):
    write_file(skill, "slow.py", "import time\nprint('started', flush=True)\ntime.sleep(120)\n")
    original = execute.subprocess.Popen.wait
    started: list[int] = []

    def interrupted(self, *args, **kwargs):
        if not started:
            started.append(self.pid)
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(execute.subprocess.Popen, "wait", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_script(str(skill), "slow.py")
    assert started
    with pytest.raises(ProcessLookupError):  # killed and reaped before the interrupt went on
        os.kill(started[0], 0)
