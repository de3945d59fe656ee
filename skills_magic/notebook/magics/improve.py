"""`%skills improve`: description variants of a skill, evaluated on a training split and reported on a held-out one.

A mixin of `%skills` (SkillsCommandMagics inherits it): its `@subcommand` methods are `%skills` subcommands."""

from __future__ import annotations


class ImproveCommands:
    """`%skills` subcommands of this subject (none yet)."""
