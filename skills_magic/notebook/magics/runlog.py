"""`%skills runs`: the run log (every run, vote, eval and batch request of the project), listed and shown.

A mixin of `%skills` (SkillsCommandMagics inherits it): its `@subcommand` methods are `%skills` subcommands."""

from __future__ import annotations


class RunLogCommands:
    """`%skills` subcommands of this subject (none yet)."""
