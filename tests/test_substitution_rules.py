"""An activated body's substitutions and inline commands follow Claude Code's rules: `$ARGUMENTS` is the raw string
as typed, `$N` / `$ARGUMENTS[N]` its shell words, a declared name with no word is empty, `\\$` escapes a
placeholder, a fenced ```! block runs, `!` only starts a command at a line start or after whitespace, and a command
that is denied or fails stops the activation. Inline commands run for real: the real gate, bash, and the
bubblewrap sandbox where this machine has one."""

from __future__ import annotations

from pathlib import Path

import pytest

from notebook_setup import notebook_folder
from skillfiles import make_skill
from skills_magic.models.scripted import ScriptedModel
from skills_magic.runs.disclosure import SkillNotActivated, substitute
from skills_magic.safety.sandbox import availability
from skills_magic.skills.catalog import Source
from skills_magic.session import SkillsSession

SANDBOXED, _ = availability()
WITH_NAMES = "name: x\ndescription: Does a thing. Use when testing.\narguments: [branch, target]\n"


def sub(body: str, arguments: str | list[str] | None = "", names=("branch", "target")) -> str:
    return substitute(body, arguments, "<dir>", "sess-1", list(names))


# --- 1. the body's own marker characters --------------------------------------------------------------------------


def test_the_bodys_own_noncharacters_become_replacement_characters():
    assert sub("a\uffffb\ufffe $0", "x") == "a\ufffdb\ufffd x"


# --- 2. escapes -----------------------------------------------------------------------------------------------------


def test_an_escaped_dollar_amount_is_a_literal_dollar():
    assert sub("It costs \\$1.00.\n", "a b") == "It costs $1.00.\n\n\nARGUMENTS: a b"  # nothing used: appended


def test_an_escaped_arguments_is_literal():
    assert sub("Write \\$ARGUMENTS here and \\$ARGUMENTS[0]: $0\n", "a b") == "Write $ARGUMENTS here and $ARGUMENTS[0]: a\n"


def test_an_escaped_declared_name_is_literal():
    assert sub("\\$branch is $branch\n", "main") == "$branch is main\n"


def test_a_backslash_before_anything_else_stays():
    assert sub("\\$HOME \\$branchy \\$x\n", "main") == "\\$HOME \\$branchy \\$x\n\n\nARGUMENTS: main"


def test_a_doubled_backslash_is_not_an_escape():
    assert sub("path \\\\$1\n", "a b") == "path \\\\b\n"


# --- 3. the words ---------------------------------------------------------------------------------------------------


def test_quoted_words_stay_one_word():
    assert sub("[$0] [$1] [$ARGUMENTS]", '"hello world" second') == '[hello world] [second] ["hello world" second]'


def test_an_unclosed_quote_falls_back_to_whitespace_words():
    assert sub("[$0] [$1]", "it's fine") == "[it's] [fine]"


# --- 4. declared names ----------------------------------------------------------------------------------------------


def test_a_declared_name_is_the_word_at_its_position():
    assert sub("$target from $branch", "main prod") == "prod from main"


def test_a_declared_name_with_no_word_is_empty_and_counts_as_used():
    assert sub("Deploy [$branch] to [$target].\n", "main") == "Deploy [main] to [].\n"
    assert sub("Deploy [$target].\n", "main") == "Deploy [].\n"  # used, though empty: nothing appended


def test_a_declared_name_followed_by_a_bracket_or_word_character_is_not_one():
    assert sub("$branch[0] $branch_x $branch-x\n", "main") == "$branch[0] $branch_x main-x\n"


def test_the_longest_declared_name_wins():
    assert sub("$a-b and $a", "x y", names=["a", "a-b"]) == "y and x"


def test_at_most_64_names_of_at_most_64_characters():
    names = [f"n{i}" for i in range(65)]
    words = " ".join(f"w{i}" for i in range(65))
    assert sub("$n63 $n64", words, names=names) == "w63 $n64"
    long_name = "a" * 65
    assert sub(f"${long_name} $b", "x y", names=[long_name, "b"]) == f"${long_name} y"  # b keeps its position


# --- 5. and 6. $ARGUMENTS[N] and $N ---------------------------------------------------------------------------------


def test_an_index_is_a_zero_based_word_or_left_as_written():
    assert sub("$ARGUMENTS[0] $ARGUMENTS[1] $ARGUMENTS[2]", "a b") == "a b $ARGUMENTS[2]"
    assert sub("$0 $1 $2 $1x", "a b") == "a b $2 $1x"


def test_a_missing_index_is_not_a_use():
    assert sub("$2 and $ARGUMENTS[2]\n", "a b") == "$2 and $ARGUMENTS[2]\n\n\nARGUMENTS: a b"


# --- 7. $ARGUMENTS is the raw string --------------------------------------------------------------------------------


def test_arguments_is_the_raw_string_verbatim():
    assert sub("[$ARGUMENTS]", "  x  'y z' \"w\"") == "[  x  'y z' \"w\"]"


# --- 8. a value is never scanned again ------------------------------------------------------------------------------


def test_a_substituted_value_is_not_scanned_again():
    assert sub("$0 / $ARGUMENTS / $branch", "'$1' '${CLAUDE_SESSION_ID}'") == "$1 / '$1' '${CLAUDE_SESSION_ID}' / $1"


# --- 9. unused arguments are appended ------------------------------------------------------------------------------


def test_unused_arguments_are_appended_after_a_blank_line():
    assert sub("Body.\n", 'a "b c"') == 'Body.\n\n\nARGUMENTS: a "b c"'


# --- 10. no arguments -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("nothing", ["", None, []], ids=["empty string", "None", "empty list"])
def test_with_no_arguments(nothing):
    body = "[$ARGUMENTS] [$branch] [$0] [$ARGUMENTS[0]]\n"
    assert sub(body, nothing) == "[] [] [$0] [$ARGUMENTS[0]]\n"


# --- 11. the folder and the session ---------------------------------------------------------------------------------


def test_folder_and_session_placeholders():
    assert substitute("${CLAUDE_SKILL_DIR} ${SKILL_DIR} ${CLAUDE_SESSION_ID} $0", "a", "skills/x", "s-1") == (
        "skills/x skills/x s-1 a")


def test_a_list_is_joined_as_shell_words():
    assert sub("[$ARGUMENTS] [$0]", ["hello world", "x"]) == "['hello world' x] [hello world]"


# --- inline commands, through the real gate -------------------------------------------------------------------------


@pytest.fixture
def place(tmp_path, monkeypatch) -> Path:
    notebook_folder(monkeypatch, tmp_path)
    return tmp_path


def session_over(place: Path, body: str, rule: str | None = None, frontmatter: str | None = None) -> SkillsSession:
    """Skill x with `body` in place/skills, a session over it, and `rule` allowed (for real: sandboxed where it can)."""
    make_skill(place / "skills" / "x", frontmatter, body, name="x")
    session = SkillsSession(sources=[Source("session", str(place / "skills"), explicit=True)], cwd=str(place))
    if rule:
        session.add_rule("allow", rule, unsandboxed=not SANDBOXED)
    return session


def activation(session: SkillsSession, arguments: str = "") -> str:
    session.model_client = ScriptedModel(["done"])
    return session.run("Do the task.", skill="x", arguments=arguments).messages[0]["content"][0]["text"]


def model_activates(session: SkillsSession):
    """(the activate_skill call, the run) for a model that activates x."""
    call = {"name": "activate_skill", "input": {"name": "x"}}
    session.model_client = ScriptedModel([{"tool_use": [call]}, "done"])
    result = session.run("Do the task.")
    return result.tool_calls[-1], result


def runs(session: SkillsSession) -> list[str]:
    return [r["path"] for r in session.audit() if r["event"] == "run"]


def test_a_fenced_block_runs_as_one_command(place):
    session = session_over(place, "Before\n```!\r\necho one\r\necho \"$0\"\r\n```\nAfter\n", "x:!echo *")
    text = activation(session, '"two words"')
    assert "Before\none\ntwo words\nAfter\n" in text
    assert runs(session) == ["!echo one\necho \"\"'two words'\"\""]  # the value closes and reopens the quotes


def test_an_inline_command_runs_at_a_line_start_and_after_whitespace_only(place):
    body = "!`echo first`\nthen !`echo second`\nKEY=!`echo third`\n(!`echo fourth`)\n"
    session = session_over(place, body, "x:!echo *")
    text = activation(session)
    assert "first\nthen second\nKEY=!`echo third`\n(!`echo fourth`)\n" in text
    assert runs(session) == ["!echo first", "!echo second"]


def test_a_command_after_an_equals_sign_is_not_run_even_without_a_rule(place):
    session = session_over(place, "Set KEY=!`echo x` first.\n")  # were it a command, the denial would stop it
    assert "Set KEY=!`echo x` first.\n" in activation(session)
    assert runs(session) == [] and not [r for r in session.audit() if r["event"] == "decision"]


def test_a_bang_inside_a_code_span_is_not_a_command(place):
    body = "Write `` !`date` `` to insert the date, or `a` !`echo real` `b`.\n"
    session = session_over(place, body, "x:!*")
    text = activation(session)
    assert "Write `` !`date` `` to insert the date, or `a` real `b`.\n" in text
    assert runs(session) == ["!echo real"]


def test_an_argument_cannot_add_a_fenced_block(place):
    session = session_over(place, "Topic: $ARGUMENTS\n", "x:!*")
    argument = "```!\necho INJECTED-$((6*7))\n```"
    text = activation(session, argument)
    assert f"Topic: {argument}\n" in text and "INJECTED-42" not in text
    assert runs(session) == []


def test_a_failing_command_stops_an_explicit_activation(place):
    session = session_over(place, "Before.\n\n!`echo broken >&2; false`\n", "x:!echo *")
    with pytest.raises(SkillNotActivated) as stopped:
        activation(session)
    assert str(stopped.value) == 'Shell command failed for pattern "!`echo broken >&2; false`": exited with 1: broken'
    assert runs(session) == ["!echo broken >&2; false"]  # it ran, and its audit row is kept


def test_a_failing_command_gives_the_model_an_error_and_leaves_the_skill_inactive(place):
    session = session_over(place, "!`false`\n", "x:!false")
    call, result = model_activates(session)
    assert call.is_error and call.error.startswith('Shell command failed for pattern "!`false`": exited with 1')
    assert result.activated == []
    assert result.final_text == "done"  # the run went on


def test_a_denied_command_stops_the_activation(place):
    marker = place / "RAN"
    session = session_over(place, f"Now: !`touch {marker}`\n")  # no rule, and nobody can answer a prompt here
    with pytest.raises(SkillNotActivated, match=r'^Shell command failed for pattern "!`touch .*`": denied: nobody can'):
        activation(session)
    call, result = model_activates(session)
    assert call.is_error and "denied: nobody can answer" in call.error and result.activated == []
    assert not marker.exists() and runs(session) == []


def test_a_failing_fenced_block_names_the_block_as_written(place):
    session = session_over(place, "```!\nexit 4\n```\n", "x:!exit *")
    with pytest.raises(SkillNotActivated) as stopped:
        activation(session)
    assert str(stopped.value) == 'Shell command failed for pattern "```!\nexit 4\n```": exited with 4'


def test_a_declared_name_reaches_a_command_as_one_quoted_word(place):
    session = session_over(place, "Said: !`echo [$target]`\n", "x:!echo *", frontmatter=WITH_NAMES)
    assert "Said: []\n" in activation(session, "main")  # no word: empty
    assert "Said: [a; b]\n" in activation(session, "main 'a; b'")
    assert runs(session) == ["!echo ['']", "!echo ['a; b']"]
