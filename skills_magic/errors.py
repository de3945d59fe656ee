"""Errors a user can cause, each one clear sentence (shown in a notebook as one line)."""

from __future__ import annotations


class SkillsMagicError(Exception):
    """Base class of every error skills_magic raises on purpose."""


class SkillNotFound(SkillsMagicError, LookupError):
    """No skill of that name in the catalog."""

    def __init__(self, name: str, suggestions: list[str] | None = None):
        self.name = name
        self.suggestions = suggestions or []
        hint = f" (did you mean {', '.join(self.suggestions)}?)" if self.suggestions else ""
        super().__init__(f"no skill named {name!r} in the catalog{hint}; `%skills list` shows the names")


class SourceNotFound(SkillsMagicError, FileNotFoundError):
    """A path given to `add`, `validate` or the CLI does not exist."""

    def __init__(self, path: str):
        self.path = path
        super().__init__(f"no such file or folder: {path}")


class NotASkillSource(SkillsMagicError, ValueError):
    """`add` of a file that is not a SKILL.md."""

    def __init__(self, path: str):
        self.path = path
        super().__init__(f"{path} is a file, not a skill folder, a collection folder or a SKILL.md")
