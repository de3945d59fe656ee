"""Errors a user can cause, each one clear sentence (shown in a notebook as one line)."""

from __future__ import annotations

import os


class SkillsMagicError(Exception):
    """Base class of every error skills_magic raises on purpose."""


class SkillNotFound(SkillsMagicError, LookupError):
    """No skill of that name in the catalog."""

    def __init__(self, name: str, suggestions: list[str] | None = None):
        self.name = name
        self.suggestions = suggestions or []
        hint = f" (did you mean {', '.join(self.suggestions)}?)" if self.suggestions else ""
        super().__init__(f"no skill named {name!r} in the catalog{hint}; `%skills list` shows the names")


class SkillSkipped(SkillNotFound):
    """A SKILL.md of that name was found, but the catalog skipped it: it could not be loaded (broken YAML, a missing
    field). `reasons` are its blocking problems, each with file and line."""

    def __init__(self, name: str, reasons: list[str]):
        self.name, self.suggestions, self.reasons = name, [], list(reasons)
        SkillsMagicError.__init__(self, f"skill {name!r} was skipped when the catalog was read, so it is not listed "
                                        f"and cannot be used: {'; '.join(self.reasons)}; fix its SKILL.md "
                                        f"(`%skills validate {name}` gives the strict verdict)")


class PathError(SkillsMagicError):
    """An error about one path, kept as `path`; the message is the class's MESSAGE with the path filled in."""

    MESSAGE = "{path}"  # `{path}`, `{name}` (the path's last part) and any detail the subclass passes by name

    def __init__(self, path: str, **details: str):
        self.path = path
        super().__init__(self.MESSAGE.format(path=path, name=os.path.basename(path), **details))


class SourceNotFound(PathError, FileNotFoundError):
    """A path given to `add`, `validate` or the CLI does not exist."""

    MESSAGE = "no such file or folder: {path}"


class NotASkillSource(PathError, ValueError):
    """`add` of a file that is not a SKILL.md."""

    MESSAGE = "{path} is a file, not a skill folder, a collection folder or a SKILL.md"


class DatabaseUnreadable(SkillsMagicError):
    """The project's SQLite file cannot be opened or read: not a database, damaged, a folder, or not permitted.

    Not an OSError on purpose: code that turns OSErrors into tool results must let this one stop the action, since
    nothing may run when its audit row cannot be written."""

    MOVE_ASIDE = "move it aside (a new one is made on next use) or set SKILLS_MAGIC_DB to another file"

    def __init__(self, path: str, reason: str, hint: str | None = None):
        self.path = path
        self.reason = reason
        super().__init__(f"cannot use the database {path}: {reason}; {hint or self.MOVE_ASIDE}")


class RunNotFound(SkillsMagicError, LookupError):
    """`%skills apply RUN` of a run that is not in the project's .skills/runs/ (or `last` before any run)."""

    SHOWN = 5  # recent runs named in the message

    def __init__(self, run: str, recent: list[str] | None = None, why: str | None = None):
        self.run = run
        self.recent = recent or []
        listed = f"recent runs: {', '.join(self.recent[:self.SHOWN])}" if self.recent else "there are no runs yet"
        super().__init__(f"{why or f'no run named {run!r} in .skills/runs'}; {listed}")


class UnknownChange(SkillsMagicError, LookupError):
    """`%skills apply RUN PATH` of a path the run did not change."""

    SHOWN = 10  # changed paths named in the message

    def __init__(self, path: str, run: str, known: list[str]):
        self.path, self.run, self.known = path, run, known
        listed = ", ".join(known[:self.SHOWN]) + (f" and {len(known) - self.SHOWN} more" if len(known) > self.SHOWN else "")
        super().__init__(f"{run} did not change {path!r}; its changes are: {listed or 'none'}")


class ManifestMismatch(SkillsMagicError):
    """A reviewed skill's files are not the reviewed bytes."""

    @staticmethod
    def changed(skill: str, path: str, reviewed: str, current: str) -> ManifestMismatch:
        """A file whose bytes differ from those reviewed (`current` may be "unreadable")."""
        return ManifestMismatch(f"{skill}/{path} is not the reviewed file: reviewed sha256 {reviewed}, now {current}; "
                                f"review it again with %skills review {skill}")

    @staticmethod
    def added_or_removed(skill: str, path: str, added: bool, sha256: str) -> ManifestMismatch:
        """A file new since the review, or one removed after it."""
        state = "is new since" if added else "was removed after"
        return ManifestMismatch(f"{skill}/{path} {state} the review (sha256 {sha256}); review it again with "
                                f"%skills review {skill}")


class ChangeError(SkillsMagicError, ValueError):
    """A run's change that cannot be read or applied as asked (a deleted file has no new bytes, a link no text)."""


class InvalidArgument(SkillsMagicError, ValueError):
    """An option or argument has a value it cannot take, or options that need each other were given apart."""


class InvalidSetting(SkillsMagicError, ValueError):
    """An environment variable that skills_magic reads (SKILLS_MAGIC_SOURCES, the retry count) has a value it refuses."""


class SkillNotWritten(SkillsMagicError, ValueError):
    """`%%skill write` could not make the skill's folder or write its SKILL.md."""
