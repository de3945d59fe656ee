"""Inline commands and rules mean what they show: an argument never becomes an inline command nor shell code, a
command's `${SKILL_DIR}` is the skill's real folder, and a rule's pattern compares names after NFC with only `*` and
`?` as wildcards (`\\*` pins a literal star). Every attack runs for real: a skill folder in tmp_path, the real gate,
bash, and the bubblewrap sandbox where this machine has one."""

from __future__ import annotations

import json
import shlex
import unicodedata
from pathlib import Path

import pytest

from notebook_setup import notebook_folder, registered_magics
from skillfiles import make_skill, write_file
from skills_magic.skills.catalog import Source
from skills_magic.models.scripted import ScriptedModel
from skills_magic.runs.disclosure import SkillNotActivated
from skills_magic.safety.policy import Policy, escape_pattern, parse_rule, pattern_matches, pre_approval_hint
from skills_magic.safety.sandbox import availability
from skills_magic.session import SkillsSession

SANDBOXED, _ = availability()
INJECTED = "INJECTED-$((6*7))"  # what an attack echoes; only a shell that ran it prints INJECTED-42
RAN = "INJECTED-42"
HOSTNAME = Path("/etc/hostname").read_text(encoding="utf-8").strip() if Path("/etc/hostname").is_file() else ""
STOLEN = f"HOST={HOSTNAME}"  # what `echo HOST=$(cat /etc/hostname)` prints when it runs
STEAL = "echo HOST=$(cat /etc/hostname)"
NFC, NFD = unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")


@pytest.fixture
def place(tmp_path, monkeypatch) -> Path:
    """tmp_path as the notebook's folder, with its own audit database and lock file."""
    notebook_folder(monkeypatch, tmp_path)
    (tmp_path / "skills").mkdir()
    return tmp_path


def new_session(place: Path, root: Path | None = None, cwd: Path | None = None) -> SkillsSession:
    return SkillsSession(sources=[Source("session", str(root or place / "skills"), explicit=True)], cwd=str(cwd or place))


def allow(session: SkillsSession, text: str) -> None:
    """An allow rule that really runs here: sandboxed where bwrap works, else explicitly unsandboxed."""
    session.add_rule("allow", text, unsandboxed=not SANDBOXED)


def skill(root: Path, body: str, name: str = "x", frontmatter: str | None = None,
          files: dict[str, str] | None = None) -> Path:
    folder = root / name
    make_skill(folder, frontmatter, body, name=name)
    for relative, text in (files or {}).items():
        write_file(folder, relative, text)
    return folder


def allowing(place: Path, body: str, rule: str, files: dict[str, str] | None = None) -> SkillsSession:
    """Skill x with `body` (and `files`) in place/skills, a session over it, and `rule` allowed."""
    skill(place / "skills", body, files=files)
    session = new_session(place)
    allow(session, rule)
    return session


def activation(session: SkillsSession, arguments=(), asker=None, name: str = "x") -> str:
    """`arguments`: the raw string as typed, or a list (joined as shell words)."""
    session.model_client = ScriptedModel(["done"])
    result = session.run("Do the task.", skill=name, arguments=arguments if isinstance(arguments, str) else list(arguments),
                         asker=asker)
    return result.messages[0]["content"][0]["text"]


def runs(session: SkillsSession) -> list[str]:
    return [r["path"] for r in session.audit() if r["event"] == "run"]


def assert_not_injected(text: str) -> None:
    """Nothing the attack carried ran (asserted first in each test: on the old code this is what fails)."""
    assert RAN not in text
    if HOSTNAME:
        assert STOLEN not in text


def script_run(session: SkillsSession, path: str, skill_name: str = "x"):
    """(the tool call, everything the model was sent) for a model asking to run one script."""
    call = {"name": "run_skill_script", "input": {"skill": skill_name, "path": path, "args": [], "stdin": ""}}
    session.model_client = ScriptedModel([{"tool_use": [call]}, "done"])
    result = session.run("Do the task.")
    return result.tool_calls[-1], json.dumps(result.messages, ensure_ascii=False)


# --- an argument never becomes an inline command ------------------------------------------------------------------


def test_an_argument_cannot_start_a_second_inline_command(place):
    session = allowing(place, "# Body\n\nToday: !`date -u -d @0 +%Y`\n\nTopic: $ARGUMENTS\n", "x:!date *")
    argument = f"!`date -u -d @0 +%Y; echo {INJECTED}; {STEAL}`"  # would match `!date *` if it were a command
    text = activation(session, argument)  # as typed: $ARGUMENTS is this string verbatim
    assert_not_injected(text)
    assert "Today: 1970\n" in text
    assert f"Topic: {argument}\n" in text  # shown as the text it is
    assert runs(session) == ["!date -u -d @0 +%Y"]


def test_an_argument_cannot_close_an_inline_command_and_open_another(place):
    session = allowing(place, "# Body\n\nStamp: !`echo $ARGUMENTS`\n", "x:!echo *")
    argument = f"x` and !`echo {INJECTED}; {STEAL}"
    text = activation(session, [argument])
    assert_not_injected(text)
    assert f"Stamp: {argument}\n" in text  # echo printed the argument: it was one word of data
    assert runs(session) == [f"!echo {shlex.quote(argument)}"]


def test_a_commands_output_is_not_scanned_for_inline_commands(place):
    session = allowing(place, "# Body\n\nOut: !`printf '!\\x60echo INJECTED-$((6*7))\\x60'`\n", "x:!*")  # prints !`echo ...`
    text = activation(session)
    assert_not_injected(text)
    assert f"Out: !`echo {INJECTED}`\n" in text
    assert len(runs(session)) == 1


# --- inside a command, a value is a quoted word ---------------------------------------------------------------------


@pytest.mark.parametrize("command, argument, printed", [
    pytest.param("echo $0", f"hi; echo {INJECTED}; {STEAL}", None, id="bare $0"),
    pytest.param("echo $ARGUMENTS", f"hi; echo {INJECTED}; {STEAL}", None, id="bare $ARGUMENTS"),
    pytest.param("echo $ARGUMENTS[0]", f"hi && echo {INJECTED} && {STEAL}", None, id="$ARGUMENTS[0]"),
    pytest.param("echo $topic", f"hi | {STEAL}; echo {INJECTED}", None, id="declared name"),
    pytest.param('echo "$0"', f'hi"; echo {INJECTED}; {STEAL}; echo "', None, id="inside double quotes"),
    pytest.param('echo "[$ARGUMENTS]"', f'hi"; echo {INJECTED}; {STEAL}; echo "', "[{quoted}]", id="$ARGUMENTS in quotes"),  # the text as typed: here a list, joined as shell words
    pytest.param("echo '$0'", f"hi'; echo {INJECTED}; {STEAL}; echo '", None, id="inside single quotes"),
    pytest.param('echo "$(echo "$0")"', f'hi"); echo {INJECTED}; {STEAL}; (echo "', None, id="inside $( )"),
    pytest.param("echo $0", f"$(echo {INJECTED}) `{STEAL}`", None, id="command substitution in the value"),
])
def test_an_argument_reaches_an_inline_command_as_one_quoted_word(place, command, argument, printed):
    skill(place / "skills", f"# Body\n\nSaid: !`{command}`\n", frontmatter="name: x\ndescription: D. Use when testing.\n"
          "arguments: [topic]\n")
    session = new_session(place)
    allow(session, "x:!echo *")
    text = activation(session, [argument])
    assert_not_injected(text)
    shown = (printed or '{}').format(argument, quoted=shlex.quote(argument))
    assert f"Said: {shown}\n" in text  # echo printed the argument, every character of it
    assert len(runs(session)) == 1


def test_the_prompt_shows_the_command_that_runs_with_its_quoted_argument(place):
    skill(place / "skills", "# Body\n\nSaid: !`echo $0`\n")
    session = new_session(place)
    asked = []
    argument = f"hi; echo {INJECTED}"
    text = activation(session, [argument], asker=lambda request: asked.append(request.path) or "once")
    assert_not_injected(text)
    assert asked == [f"!echo {shlex.quote(argument)}"] == runs(session)
    assert f"Said: {argument}\n" in text


def test_a_placeholder_the_reader_cannot_follow_is_refused_and_nothing_runs(place):
    session = allowing(place, "# Body\n\nSaid: !`echo ${X:-$0}`\n", "x:!echo *")
    with pytest.raises(SkillNotActivated) as stopped:  # pasted: `echo ${X:-}; echo INJECTED...`
        activation(session, [f"}}; echo {INJECTED}; {STEAL}; echo {{"])
    assert_not_injected(str(stopped.value))
    assert str(stopped.value) == ('Shell command failed for pattern "!`echo ${X:-$0}`": $0 comes after `${`, where it '
                                  "cannot be quoted safely")
    assert runs(session) == []


# --- ${SKILL_DIR} in a command is the skill's real folder -----------------------------------------------------------


def test_skill_dir_in_a_command_reads_the_skills_file_far_from_the_session(place):
    root = place / f"far away; echo {INJECTED}; {STEAL}" / "skills"  # a folder name that is shell code when pasted
    folder = skill(root, "# Body\n\nData: !`cat ${SKILL_DIR}/data.txt`\n\nFolder: ${SKILL_DIR}\n",
                   files={"data.txt": "the skill's data\n"})
    notebook = place / "notebooks" / "deep" / "down"
    notebook.mkdir(parents=True)
    session = new_session(place, root, notebook)
    allow(session, "x:!cat *")
    text = activation(session)
    assert_not_injected(text)
    assert "Data: the skill's data\n" in text
    assert f"Folder: {session.show_path(str(folder))}\n" in text  # prose keeps the shown folder
    assert runs(session) == [f"!cat {shlex.quote(str(folder.resolve()))}/data.txt"]


# --- legitimate commands still work ---------------------------------------------------------------------------------


def test_a_date_command_with_a_percent_format_runs(place):
    session = allowing(place, "# Body\n\nToday: !`date -u -d @0 +%Y-%m`\n", "x:!date *")
    assert "Today: 1970-01\n" in activation(session)


def test_arguments_of_plain_words_in_a_command_run_as_written(place):
    session = allowing(place, "# Body\n\nSaid: !`echo $ARGUMENTS`\n\nFor $0.\n", "x:!echo *")
    text = activation(session, ["hello", "world"])
    assert "Said: hello world\n" in text and "For hello." in text and "ARGUMENTS:" not in text
    assert runs(session) == ["!echo hello world"]  # the rule sees the command as the body shows it, filled in


def test_an_index_with_no_argument_keeps_its_shell_meaning(place):
    session = allowing(place, "# Body\n\nFirst: !`echo a b | awk '{print $1}'`\n", "x:!echo *")
    assert "First: a\n" in activation(session)


def test_an_escaped_dollar_in_a_command_is_left_to_the_shell(place):
    session = allowing(place, "# Body\n\nSaid: !`echo \\$0 is the shell`\n", "x:!echo *")
    assert "Said: $0 is the shell\n" in activation(session, ["ignored"])


# --- names are compared after NFC -----------------------------------------------------------------------------------

PRINT_RAN = "print('INJECTED-' + str(6 * 7))\n"


@pytest.mark.parametrize("rule_form, file_form", [(NFC, NFD), (NFD, NFC)], ids=["rule NFC, file NFD", "rule NFD, file NFC"])
def test_a_deny_rule_stops_the_file_whatever_its_unicode_form(place, rule_form, file_form):
    folder = skill(place / "skills", "# Body\n", files={f"scripts/{file_form}.py": PRINT_RAN})
    assert f"{file_form}.py" in [p.name for p in (folder / "scripts").iterdir()]  # the disk keeps the form as written
    session = new_session(place)
    allow(session, "x:*")
    session.add_rule("deny", f"x:scripts/{rule_form}.py")
    call, transcript = script_run(session, f"scripts/{file_form}.py")
    assert call.is_error and "denied" in call.error and RAN not in transcript
    direct = session.run_script("x", f"scripts/{file_form}.py")  # the user's own run: deny rules still win
    assert direct.stop_reason == "denied" and RAN not in (direct.final_text or "")
    assert runs(session) == []


def test_a_deny_rule_names_the_skill_whatever_its_unicode_form(place):
    skill(place / "skills", "# Body\n", name=NFD, files={"scripts/run.py": PRINT_RAN})
    session = new_session(place)
    name, = [s.name for s in session.scan().skills]
    allow(session, "*:scripts/*")
    session.add_rule("deny", f"{NFD if name == NFC else NFC}:scripts/run.py")  # the other form than the catalog's
    call, transcript = script_run(session, "scripts/run.py", skill_name=name)
    assert call.is_error and "denied" in call.error and RAN not in transcript
    assert runs(session) == []


def test_an_inline_command_rule_matches_whatever_the_unicode_form(place):
    session = allowing(place, f"# Body\n\nSaid: !`echo {NFD}`\n", f"x:!echo {NFC}")
    assert f"Said: {NFD}\n" in activation(session)


# --- only `*` and `?` are wildcards ---------------------------------------------------------------------------------


def test_brackets_in_a_rule_are_literal(place):
    session = allowing(place, "# Body\n", "x:scripts/*.py",
                       files={"scripts/a.py": "print('plain a')\n", "scripts/[a].py": PRINT_RAN})
    session.add_rule("deny", "x:scripts/[a].py")
    bracketed, transcript = script_run(session, "scripts/[a].py")
    assert bracketed.is_error and "denied" in bracketed.error and RAN not in transcript
    plain, transcript = script_run(session, "scripts/a.py")
    assert not plain.is_error and "plain a" in transcript
    assert runs(session) == ["scripts/a.py"]


def test_an_escaped_star_pins_the_one_file_with_a_star_in_its_name(place):
    session = allowing(place, "# Body\n", "x:scripts/r\\*n.py",
                       files={"scripts/r*n.py": "print('star')\n", "scripts/rXn.py": PRINT_RAN})
    assert not script_run(session, "scripts/r*n.py")[0].is_error
    other, transcript = script_run(session, "scripts/rXn.py")  # nobody to ask: denied, with the rule that would allow it
    assert other.is_error and "%skills allow x:scripts/rXn.py" in other.error and RAN not in transcript
    assert runs(session) == ["scripts/r*n.py"]


def test_a_star_still_matches_any_run_of_characters_across_folders(place):
    skill(place / "skills", "# Body\n", files={"scripts/a.py": "print('a')\n", "scripts/sub/b.py": "print('b')\n",
                                               "scripts/c.sh": "echo c\n"})
    session = new_session(place)
    allow(session, "x:scripts/*.py")
    assert not script_run(session, "scripts/a.py")[0].is_error
    assert not script_run(session, "scripts/sub/b.py")[0].is_error
    assert script_run(session, "scripts/c.sh")[0].is_error
    assert runs(session) == ["scripts/a.py", "scripts/sub/b.py"]


@pytest.mark.parametrize("pattern, path, matches", [
    ("scripts/[ab].sh", "scripts/a.sh", False),
    ("scripts/[ab].sh", "scripts/[ab].sh", True),
    ("scripts/[!a].sh", "scripts/b.sh", False),
    ("scripts/r?n.py", "scripts/run.py", True),
    ("scripts/r\\?n.py", "scripts/run.py", False),
    ("scripts/r\\?n.py", "scripts/r?n.py", True),
    ("scripts/a\\\\b.py", "scripts/a\\b.py", True),
    ("!printf 'a\\n'", "!printf 'a\\n'", True),  # a backslash before anything else is itself
    ("!date*", "!date +%Y\nrm -rf /", True),  # as fnmatch: `*` covers a newline too
])
def test_a_pattern_means_what_it_shows(pattern, path, matches):
    assert pattern_matches(pattern, path) is matches
    assert parse_rule("allow", f"x:{pattern}", "%skills allow").matches("x", path) is matches


@pytest.mark.parametrize("path", ["scripts/r*n.py", "scripts/[a].py", "scripts/a?.py", "scripts/back\\slash.py",
                                  "!date +%Y", "!echo 'it''s' \"x\"", f"scripts/{NFD}.py"])
def test_an_escaped_path_matches_that_path_only(path):
    assert pattern_matches(escape_pattern(path), path)
    for other in ("scripts/rXn.py", "scripts/a.py", "scripts/ab.py", "scripts/back\\\\slash.py", "!date +%Y-%m"):
        if other != path:
            assert not pattern_matches(escape_pattern(path), other)


@pytest.mark.parametrize("path", ["scripts/r*n.py", "scripts/[a].py", "scripts/a?.py", "scripts/back\\slash.py",
                                  "!date +%Y", "!echo 'quoted words'"])
def test_the_pre_approval_hint_typed_as_a_magic_allows_exactly_that_path(ip, place, path):
    with registered_magics(ip) as magics:
        hint = pre_approval_hint("x", path)
        assert hint.startswith("%skills ")
        ip.run_line_magic("skills", hint.removeprefix("%skills "))
    policy = magics.session.policy
    assert policy.decide("x", path).verdict == "allow"
    assert policy.decide("x", path + "x").verdict == "ask" and policy.decide("x", "scripts/rXn.py").verdict == "ask"


def test_answering_always_pins_the_path_asked_for_and_policy_shows_it(place):
    skill(place / "skills", "# Body\n", files={"scripts/r*n.py": "print('star')\n", "scripts/rXn.py": PRINT_RAN})
    session = new_session(place)
    asked = []

    def always(request):
        asked.append(request.path)
        return "always"

    for path in ("scripts/r*n.py", "scripts/r*n.py", "scripts/rXn.py"):
        call = {"name": "run_skill_script", "input": {"skill": "x", "path": path}}
        session.model_client = ScriptedModel([{"tool_use": [call]}, "done"])
        session.run("Do the task.", asker=always)
    assert asked == ["scripts/r*n.py", "scripts/rXn.py"]  # the first `always` did not cover rXn.py
    assert [str(r) for r in session.policy.rules] == ["allow x:scripts/r\\*n.py  [asked: always]",
                                                      "allow x:scripts/rXn.py  [asked: always]"]


def test_policy_shows_a_rule_exactly_as_it_matches():
    policy = Policy()
    rule = policy.add(parse_rule("deny", "x:scripts/[a].py", "%skills deny"))
    assert str(rule) == "deny x:scripts/[a].py  [%skills deny]"
    assert policy.decide("x", "scripts/[a].py").verdict == "deny" and policy.decide("x", "scripts/a.py").verdict == "ask"
