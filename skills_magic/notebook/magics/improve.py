"""`%skills improve`: description variants of a skill, evaluated on a training split and reported on a held-out one.

A mixin of `%skills` (SkillsCommandMagics inherits it): its `@subcommand` methods are `%skills` subcommands."""

from __future__ import annotations

from IPython.core.magic_arguments import argument

from skills_magic.notebook.magics.commands import positive, subcommand
from skills_magic.notebook.views.improve import ImproveView


class ImproveCommands:
    """`%skills improve NAME PROMPTS`."""

    @subcommand("improve")
    @argument("name", help="the skill whose description is improved")
    @argument("prompts", help="the prompt set (YAML, as for %%skills eval): split into training and held-out prompts")
    @argument("--variants", type=positive, default=3, metavar="N", help="descriptions the model is asked for")
    @argument("--runs", type=positive, default=1, metavar="N", help="runs of each prompt per description")
    @argument("--max-cost", type=float, metavar="USD", help="stop before the call that would cross this many dollars")
    def _improve(self, args):
        """Ask the model for description variants, choose on the training prompts, judge on the held-out ones next to
        the current description (intervals, cost); nothing is written: the view shows the %%skill write cell."""
        return ImproveView(self.session.improve(args.name, args.prompts, variants=args.variants, runs=args.runs,
                                                 max_cost=args.max_cost))
