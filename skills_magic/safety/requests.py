"""A permission request as a person sees it before deciding, the answers they can give, and the asker that
answers where nobody can: deny. Value types only, so a front end can show and answer them without the gate."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from skills_magic.errors import SkillsMagicError

Answer = Literal["once", "always", "deny"]


@dataclass(frozen=True)
class PermissionRequest:
    """What a person sees before deciding: never less than this."""

    skill: str
    path: str  # script path in the skill, or `!command`
    digest: str | None
    arguments: tuple[str, ...]
    stdin_bytes: int
    allowed_tools: Any  # the skill's own `allowed-tools`: a request, shown, never a grant
    sandbox: str = ""  # the line saying what the run is confined by (the gate fills it in)

    @property
    def rule(self) -> str:
        return f"{self.skill}:{self.path}"

    def describe(self) -> str:
        lines = [
            f"skill {self.skill} wants to run {self.path}",
            f"  sha256    {self.digest or '-'}",
            f"  arguments {list(self.arguments)}",
            f"  stdin     {self.stdin_bytes:,} bytes",
        ]
        if self.sandbox:
            lines.append(f"  sandbox   {self.sandbox}")
        if self.allowed_tools:
            lines.append(f"  the skill requests allowed-tools: {self.allowed_tools} (a request, not a grant)")
        return "\n".join(lines)


class Unattended(SkillsMagicError):
    """Nobody can answer a prompt here (the kernel takes no input)."""


def unattended(request: PermissionRequest) -> Answer:
    raise Unattended("nobody can answer a permission prompt here (the kernel does not accept input)")


Asker = Callable[[PermissionRequest], Answer]
