"""`%skills price`: the price table runs are costed with, and a user's overrides.

A mixin of `%skills` (SkillsCommandMagics inherits it): its `@subcommand` methods are `%skills` subcommands."""

from __future__ import annotations


class CostCommands:
    """`%skills` subcommands of this subject (none yet)."""
