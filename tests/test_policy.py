"""The permission policy: rules SKILL:PATH (`*` and `?` wildcards), deny before allow before ask, where each rule came from, and
which origins may use a wildcard skill."""

from __future__ import annotations

from pathlib import Path

import pytest

from skills_magic.skills.catalog import Source
from skills_magic.errors import SkillsMagicError
from skills_magic.safety.policy import POLICY_FILE, USER_ORIGIN, Decision, Policy, Rule, RuleError, parse_rule, pre_approval_hint
from skills_magic.session import SkillsSession

# --- parsing ----------------------------------------------------------------------------------------------------


def test_a_rule_names_a_skill_and_a_path_pattern():
    rule = parse_rule("allow", "  source-verification:scripts/verify.py ", "%skills allow")
    assert rule == Rule("allow", "source-verification", "scripts/verify.py", "%skills allow", ())
    assert rule.text == "source-verification:scripts/verify.py"
    assert str(rule) == "allow source-verification:scripts/verify.py  [%skills allow]"


def test_a_rule_with_env_shows_it():
    rule = parse_rule("allow", "x:scripts/*", "%skills allow", env=["GITHUB_TOKEN", "GH_TOKEN"])
    assert rule.env == ("GITHUB_TOKEN", "GH_TOKEN")
    assert str(rule) == "allow x:scripts/* (env: GITHUB_TOKEN, GH_TOKEN)  [%skills allow]"


def test_an_inline_command_rule_keeps_its_spaces_and_slashes():
    rule = parse_rule("allow", "x:!date +%Y", "%skills allow")
    assert rule.pattern == "!date +%Y"
    assert parse_rule("allow", "x:!cat references/notes.md", "%skills allow").pattern == "!cat references/notes.md"


@pytest.mark.parametrize("text, message", [
    ("no-colon", "is not a rule"),
    ("x:", "needs both a skill and a path pattern"),
    (":y", "needs both a skill and a path pattern"),
    (" : ", "needs both a skill and a path pattern"),
    ("x:../y", "stays inside it"),
    ("x:scripts/../../y", "stays inside it"),
    ("x:/abs", "stays inside it"),
    ("x:/", "stays inside it"),
])
def test_malformed_rules_are_errors(text, message):
    with pytest.raises(RuleError, match=message):
        parse_rule("allow", text, "%skills allow")
    with pytest.raises(RuleError):
        parse_rule("deny", text, "%skills deny")


def test_a_rule_error_is_a_skills_magic_error_and_a_value_error():
    with pytest.raises(SkillsMagicError):
        parse_rule("allow", "no-colon", "%skills allow")
    with pytest.raises(ValueError):
        parse_rule("allow", "no-colon", "%skills allow")


def test_a_rule_is_allow_or_deny():
    with pytest.raises(RuleError, match="`allow` or `deny`"):
        parse_rule("ask", "x:y", "%skills ask")


def test_dots_inside_a_name_are_not_a_parent_folder():
    assert parse_rule("allow", "x:scripts/..hidden/run.py", "o").pattern == "scripts/..hidden/run.py"
    assert parse_rule("allow", "x:scripts/a..b.py", "o").pattern == "scripts/a..b.py"


# --- wildcard skills: typed by the user only ------------------------------------------------------------------


def test_a_wildcard_skill_typed_by_the_user_is_accepted():
    rule = parse_rule("allow", "*:scripts/*", "%skills allow")
    assert rule.skill == "*" and rule.matches("anything", "scripts/run.py") and rule.matches("other", "scripts/x.sh")
    everything = parse_rule("allow", "*", "%skills allow")
    assert (everything.skill, everything.pattern) == ("*", "*")
    assert everything.matches("x", "scripts/run.py") and everything.matches("y", "!date")


@pytest.mark.parametrize("text", ["*:scripts/*", "*", "x*:scripts/*", "*x:run.py", "s?ill*:run.py"])
def test_a_wildcard_skill_from_a_file_is_refused(text):
    with pytest.raises(RuleError):
        parse_rule("allow", text, POLICY_FILE, user_typed=False)


@pytest.mark.parametrize("text", ["x*:scripts/*", "*x:run.py"])
def test_a_partial_wildcard_skill_is_refused_even_when_typed(text):
    with pytest.raises(RuleError, match="wildcard skill"):
        parse_rule("allow", text, "%skills allow")


def test_a_skill_name_is_compared_exactly_not_as_a_pattern():
    rule = Rule("allow", "x", "scripts/*", "o")
    assert rule.matches("x", "scripts/run.py")
    assert not rule.matches("xy", "scripts/run.py") and not rule.matches("X", "scripts/run.py")


def test_ipython_config_may_use_a_wildcard_skill(tmp_path):
    session = SkillsSession(sources=[], cwd=str(tmp_path), allow=["*:scripts/*"], deny=["*:scripts/danger.sh"])
    assert [(r.kind, r.text, r.origin) for r in session.policy.rules] == [
        ("deny", "*:scripts/danger.sh", "IPython config"), ("allow", "*:scripts/*", "IPython config")]
    assert session.policy.problems == []
    assert session.policy.decide("any", "scripts/run.py").verdict == "allow"
    assert session.policy.decide("any", "scripts/danger.sh").verdict == "deny"


def test_a_bad_ipython_config_rule_is_reported_not_fatal(tmp_path):
    session = SkillsSession(sources=[], cwd=str(tmp_path), allow=["no-colon", "x:ok.py"], deny=["x:/abs"])
    assert [r.text for r in session.policy.rules] == ["x:ok.py"]
    assert len(session.policy.problems) == 2
    assert any("no-colon" in p for p in session.policy.problems)
    assert any("x:/abs" in p for p in session.policy.problems)


def test_a_wildcard_skill_in_skills_policy_yaml_is_refused_and_reported(tmp_path):
    (tmp_path / POLICY_FILE).write_text(
        "allow:\n  - '*:scripts/*'\n  - '*'\n  - x:scripts/run.py\ndeny:\n  - '*:scripts/danger.sh'\n", encoding="utf-8")
    session = SkillsSession(sources=[], cwd=str(tmp_path))
    session.trust()  # even trusted, a project's file names its skills
    assert [(r.kind, r.text, r.origin) for r in session.policy.rules] == [("allow", "x:scripts/run.py", POLICY_FILE)]
    problems = session.policy.problems
    assert len(problems) == 3
    assert any("'*:scripts/*'" in p and "wildcard skill" in p and POLICY_FILE in p for p in problems)
    assert any("'*:scripts/danger.sh'" in p and "wildcard skill" in p for p in problems)
    assert session.policy.decide("other", "scripts/run.py").verdict == "ask"


# --- the policy file --------------------------------------------------------------------------------------------


def test_the_policy_file_reads_strings_and_mappings_with_env(tmp_path):
    path = tmp_path / POLICY_FILE  # the user's own file: a project's may not grant `env` (tests/test_trust.py)
    path.write_text(
        "allow:\n"
        "  - x:scripts/*\n"
        "  - rule: y:run.sh\n"
        "    env: [GITHUB_TOKEN, AWS_PROFILE]\n"
        "deny:\n"
        "  - x:scripts/danger.py\n",
        encoding="utf-8",
    )
    policy = Policy()
    policy.load_file(str(path), owner="user")
    assert policy.problems == []
    assert [(r.kind, r.text, r.env, r.origin) for r in policy.rules] == [
        ("deny", "x:scripts/danger.py", (), USER_ORIGIN),
        ("allow", "x:scripts/*", (), USER_ORIGIN),
        ("allow", "y:run.sh", ("GITHUB_TOKEN", "AWS_PROFILE"), USER_ORIGIN),
    ]
    assert policy.granted_env("y", "run.sh") == ("GITHUB_TOKEN", "AWS_PROFILE")
    assert policy.granted_env("x", "scripts/run.py") == ()


@pytest.mark.parametrize("text, problem", [
    ("allow: [\n", "cannot be read"),
    ("- x:y\n", "expected a mapping"),
    ("just text\n", "expected a mapping"),
    ("allow:\n  - no-colon\n  - rule: x:/abs\n  - {env: [A]}\n", "is not a rule"),
])
def test_a_bad_policy_file_is_reported_never_fatal(tmp_path, text, problem):
    path = tmp_path / POLICY_FILE
    path.write_text(text, encoding="utf-8")
    policy = Policy()
    policy.load_file(str(path))
    assert any(problem in p for p in policy.problems), policy.problems
    assert policy.rules == []


def test_a_policy_file_that_is_not_utf8_is_reported(tmp_path):
    path = tmp_path / POLICY_FILE
    path.write_bytes(b"allow:\n  - x:\xff\xfe\n")
    policy = Policy()
    policy.load_file(str(path))
    assert policy.rules == [] and len(policy.problems) == 1 and "cannot be read" in policy.problems[0]


def test_a_missing_or_empty_policy_file_adds_nothing(tmp_path):
    policy = Policy()
    policy.load_file(str(tmp_path / POLICY_FILE))
    (tmp_path / "empty.yaml").write_text("", encoding="utf-8")
    policy.load_file(str(tmp_path / "empty.yaml"))
    assert policy.rules == [] and policy.problems == []


def test_the_session_reads_the_policy_file_of_its_folder_after_ipython_config(tmp_path):
    (tmp_path / POLICY_FILE).write_text("deny:\n  - x:scripts/*\n", encoding="utf-8")
    session = SkillsSession(sources=[], cwd=str(tmp_path), allow=["x:scripts/run.py"])
    assert [(r.kind, r.origin) for r in session.policy.rules] == [("allow", "IPython config"), ("deny", POLICY_FILE)]
    decision = session.policy.decide("x", "scripts/run.py")
    assert decision.verdict == "deny" and decision.rule.origin == POLICY_FILE


def test_a_policy_file_env_written_as_one_name_grants_that_name_or_is_reported(tmp_path):
    path = tmp_path / POLICY_FILE
    path.write_text("allow:\n  - rule: x:scripts/run.py\n    env: GITHUB_TOKEN\n", encoding="utf-8")
    policy = Policy()
    policy.load_file(str(path))
    granted = policy.granted_env("x", "scripts/run.py")
    assert granted == ("GITHUB_TOKEN",) or (policy.problems and granted == ())


# --- deciding ---------------------------------------------------------------------------------------------------


def rules(*specs: tuple[str, str]) -> Policy:
    policy = Policy()
    for kind, text in specs:
        policy.add(parse_rule(kind, text, f"%skills {kind}"))
    return policy


@pytest.mark.parametrize("order", ["deny first", "allow first"])
def test_deny_beats_allow_whatever_the_order_and_specificity(order):
    specs = [("deny", "x:scripts/*"), ("allow", "x:scripts/run.py")]
    policy = rules(*(specs if order == "deny first" else specs[::-1]))
    decision = policy.decide("x", "scripts/run.py")
    assert decision.verdict == "deny" and decision.rule.text == "x:scripts/*"
    assert policy.granted_env("x", "scripts/run.py") == ()


def test_a_specific_deny_beats_a_wildcard_allow():
    policy = rules(("allow", "*"), ("allow", "x:*"), ("deny", "x:scripts/run.py"))
    assert policy.decide("x", "scripts/run.py").verdict == "deny"
    assert policy.decide("x", "scripts/other.py").verdict == "allow"
    assert policy.decide("y", "scripts/run.py").verdict == "allow"


def test_with_no_matching_rule_the_answer_is_ask():
    policy = rules(("allow", "x:scripts/run.py"), ("deny", "y:*"))
    decision = policy.decide("x", "scripts/other.py")
    assert decision == Decision("ask") and decision.reason == "no rule matches"
    assert policy.decide("z", "scripts/run.py").verdict == "ask"


def test_the_first_matching_rule_of_a_kind_decides_and_is_the_reason():
    policy = rules(("allow", "x:scripts/*"), ("allow", "x:*"))
    decision = policy.decide("x", "scripts/run.py")
    assert decision.rule.text == "x:scripts/*" and decision.reason == "allow x:scripts/*  [%skills allow]"


@pytest.mark.parametrize("pattern, path, matches", [
    ("scripts/*", "scripts/run.py", True),
    ("scripts/*", "scripts/sub/run.py", True),  # `*` also crosses `/`
    ("scripts/*", "scripts", False),
    ("scripts/*", "other/scripts/run.py", False),
    ("scripts/*.py", "scripts/run.py", True),
    ("scripts/*.py", "scripts/run.sh", False),
    ("scripts/run.py", "scripts/run.py", True),
    ("scripts/run.py", "scripts/run.pyc", False),
    ("scripts/r?n.py", "scripts/run.py", True),
    ("scripts/r?n.py", "scripts/rn.py", False),
    ("scripts/[ab].sh", "scripts/[ab].sh", True),  # `[` is a literal, never a set
    ("scripts/[ab].sh", "scripts/a.sh", False),
    ("scripts/[ab].sh", "scripts/c.sh", False),
    ("Scripts/*", "scripts/run.py", False),  # case-sensitive on every platform
    ("*", "scripts/run.py", True),
    ("*", "!date +%Y", True),
    ("!date*", "!date +%Y", True),
    ("!date*", "!rm -rf /", False),
    ("!date*", "scripts/date.py", False),
])
def test_patterns_treat_only_star_and_question_mark_as_wildcards(pattern, path, matches):
    rule = parse_rule("allow", f"x:{pattern}", "%skills allow")
    assert rule.matches("x", path) is matches
    assert (rules(("allow", f"x:{pattern}")).decide("x", path).verdict == "allow") is matches


def test_adding_the_same_rule_twice_keeps_one():
    policy = Policy()
    first = policy.add(parse_rule("allow", "x:y", "%skills allow"))
    policy.add(parse_rule("allow", "x:y", "%skills allow"))
    assert policy.rules == [first]


def test_extend_reports_bad_rules_and_keeps_the_good_ones():
    policy = Policy()
    policy.extend("allow", ["x:a.py", "bad", "*:b.py"], "IPython config")
    assert [r.text for r in policy.rules] == ["x:a.py", "*:b.py"]
    assert len(policy.problems) == 1 and "'bad'" in policy.problems[0]


def test_the_pre_approval_hint_is_the_magic_to_type():
    assert pre_approval_hint("x", "scripts/run.py") == "%skills allow x:scripts/run.py"


def test_session_add_rule_records_the_magic_as_origin(tmp_path):
    session = SkillsSession(sources=[], cwd=str(tmp_path))
    allow = session.add_rule("allow", "x:scripts/*", ["GITHUB_TOKEN"])
    deny = session.add_rule("deny", "x:scripts/danger.sh")
    assert (allow.origin, allow.env) == ("%skills allow", ("GITHUB_TOKEN",))
    assert deny.origin == "%skills deny"
    assert session.add_rule("allow", "*:scripts/*").skill == "*"  # the user typed it
    with pytest.raises(RuleError):
        session.add_rule("allow", "x:../y")


def test_allowing_again_with_env_grants_the_variable(tmp_path):
    session = SkillsSession(sources=[], cwd=str(tmp_path))
    session.add_rule("allow", "x:scripts/*")
    session.add_rule("allow", "x:scripts/*", ["GITHUB_TOKEN"])
    assert session.policy.granted_env("x", "scripts/run.py") == ("GITHUB_TOKEN",)


def test_a_rule_from_a_cloned_repository_sits_beside_the_users(tmp_path: Path):
    (tmp_path / POLICY_FILE).write_text("allow:\n  - x:scripts/*\n", encoding="utf-8")
    session = SkillsSession(sources=[Source("session", str(tmp_path / "skills"), True)], cwd=str(tmp_path))
    session.trust()
    session.add_rule("deny", "x:scripts/run.py")
    assert session.policy.decide("x", "scripts/run.py").rule.origin == "%skills deny"
    assert session.policy.decide("x", "scripts/other.py").rule.origin == POLICY_FILE


def test_the_project_policy_file_is_read_again_when_it_changes(tmp_path):
    import os

    from skills_magic.safety.policy import Policy

    path = tmp_path / "skills-policy.yaml"
    path.write_text("allow:\n  - x:scripts/*\n", encoding="utf-8")
    policy = Policy()
    policy.extend("allow", ["y:run.py"], "%skills allow")
    policy.load_file(str(path))
    policy.trust_file(str(path))
    assert policy.decide("x", "scripts/a.py").verdict == "allow"
    path.write_text("deny:\n  - x:scripts/*\nallow:\n  - '*:everything'\n", encoding="utf-8")
    os.utime(path, ns=(1, 1))  # a different mtime even on a coarse clock
    assert policy.decide("x", "scripts/a.py").verdict == "deny"
    assert [r.text for r in policy.rules] == ["y:run.py", "x:scripts/*"]  # the user's rule kept, the old file rule gone
    assert any("wildcard" in p for p in policy.problems)
    path.unlink()
    assert policy.decide("x", "scripts/a.py").verdict == "ask" and policy.problems == []
    assert policy.decide("y", "run.py").verdict == "allow"
