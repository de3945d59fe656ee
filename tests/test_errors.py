"""One error root: every error a user can cause is a SkillsMagicError, which the magics show as one line; any other
exception (a bug) reaches the user as a traceback."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from notebook_setup import registered_magics

from skills_magic.errors import InvalidArgument, SkillsMagicError

PACKAGE = Path(__file__).resolve().parent.parent / "skills_magic"


def _modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__main__":  # importing it runs the CLI
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_every_public_exception_class_derives_from_skills_magic_error():
    """Private ones (`_Abstain`, `_Answer`) are control flow inside one module, never shown to anyone."""
    outside = []
    for name in _modules():
        module = importlib.import_module(name)
        for attribute, value in vars(module).items():
            if (inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name
                    and not attribute.startswith("_") and not issubclass(value, SkillsMagicError)):
                outside.append(f"{name}.{attribute}")

    assert outside == []


@pytest.fixture
def skills(ip, tmp_path, monkeypatch):
    """`%skills` on a fresh session in tmp_path, and that session (to replace one of its methods)."""
    monkeypatch.setenv("SKILLS_MAGIC_SOURCES", "project,bundled")
    monkeypatch.delenv("SKILLS_MAGIC_PATH", raising=False)
    monkeypatch.chdir(tmp_path)
    with registered_magics(ip) as magics:
        yield magics.session, lambda line: ip.run_line_magic("skills", line)


def test_a_skills_magic_error_is_shown_as_one_usage_line(skills, monkeypatch):
    session, run = skills

    def refuse(*args, **kwargs):
        raise InvalidArgument("a budget is a number of characters, not -1")

    monkeypatch.setattr(session, "listing", refuse)

    with pytest.raises(UsageError, match="^a budget is a number of characters, not -1$"):
        run("list")


def test_an_unexpected_value_error_is_not_turned_into_a_usage_error(skills, monkeypatch):
    session, run = skills

    def bug(*args, **kwargs):
        raise ValueError("bug")

    monkeypatch.setattr(session, "listing", bug)

    with pytest.raises(ValueError, match="^bug$") as raised:
        run("list")
    assert not isinstance(raised.value, UsageError)


def test_a_mistake_the_session_finds_is_a_usage_error_and_still_a_value_error(skills):
    session, run = skills

    with pytest.raises(ValueError) as raised:
        session.listing(budget=-1)
    assert isinstance(raised.value, SkillsMagicError)
    with pytest.raises(UsageError, match="usage: %skills model scripted FILE"):
        run("model scripted")
