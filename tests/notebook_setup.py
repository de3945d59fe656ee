"""The notebook a test runs as: its folder with what a session there reads from the environment, and the `%skills`
magics registered on the shared IPython shell
(`from notebook_setup import no_input, notebook_folder, register_magics, registered_magics`)."""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path

# a key or a model choice on the machine would change which model a session picks: a test starts with neither
MACHINE_CHOICES = ("ANTHROPIC_API_KEY", "SKILLS_MAGIC_MODEL")


def notebook_folder(monkeypatch, folder: Path, *, db: str | None = "audit.sqlite", lock: str | None = "skills.lock",
                    sources: str | None = None, path: Path | None = None,
                    forget: Iterable[str] = MACHINE_CHOICES) -> Path:
    """`folder` as the notebook's folder (the working folder), with its own audit database `db` and lock file `lock`
    in it (None: the variable unset, so a session uses its default place), only `sources` searched and `path` as
    SKILLS_MAGIC_PATH when given, and none of the machine's `forget` variables."""
    monkeypatch.chdir(folder)
    for variable, name in (("SKILLS_MAGIC_DB", db), ("SKILLS_MAGIC_LOCK", lock)):
        if name is None:
            monkeypatch.delenv(variable, raising=False)
        else:
            monkeypatch.setenv(variable, str(folder / name))
    if sources is not None:
        monkeypatch.setenv("SKILLS_MAGIC_SOURCES", sources)
    if path is not None:
        monkeypatch.setenv("SKILLS_MAGIC_PATH", str(path))
    for variable in forget:
        monkeypatch.delenv(variable, raising=False)
    return folder


def no_input(monkeypatch, error: BaseException | type[BaseException] = EOFError) -> None:
    """Nobody at the notebook: every `input()` prompt raises `error` (EOFError: what a kernel without stdin does)."""
    def refuse(prompt=""):
        raise error

    monkeypatch.setattr(builtins, "input", refuse)


def register_magics(ip, config=None):
    """A fresh `SkillsMagics` on the shell `ip`, in place of any before it (a new session in the working folder, as
    after a kernel restart; with the IPython `config` when given)."""
    from skills_magic.notebook.magics import SkillsMagics  # IPython only for the tests that drive magics

    instance = SkillsMagics(shell=ip) if config is None else SkillsMagics(shell=ip, config=config)
    ip.register_magics(instance)
    return instance


@contextlib.contextmanager
def registered_magics(ip, config=None) -> Iterator:
    """`register_magics` for the length of a block: unregistered when it ends, however it ends."""
    from skills_magic.notebook.magics import unregister

    instance = register_magics(ip, config)
    try:
        yield instance
    finally:
        unregister(ip)
