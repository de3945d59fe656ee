"""`%skills learn on|off`, `learned`, `diff`, `revert`, `promote` (and `history NAME`): the skills a model wrote.

A mixin of `%skills` (SkillsCommandMagics inherits it): its `@subcommand` methods are `%skills` subcommands. Each
calls the session's `learning` (runs.learn.Learning) and returns a view of notebook/views/learned.py."""

from __future__ import annotations

from IPython.core.magic_arguments import argument

from skills_magic.notebook.magics.commands import positive, subcommand
from skills_magic.notebook.views.learned import LearnedDiffView, LearnedHistoryView, LearnedNoteView, LearnedView


class LearnedCommands:
    """The person's side of learned skills: turn learning on, see every version, compare, revert, promote."""

    @subcommand("learn")
    @argument("state", choices=["on", "off"], help="on: runs offer the model the manage_skill tool (off by default)")
    def _learn(self, args):
        """Let the model write its own skills in this session (`manage_skill`), or stop it."""
        on = self.session.learning.turn(args.state == "on")
        note = ("learning is on: runs offer manage_skill; what the model writes is listed last, under learned"
                if on else "learning is off: runs do not offer manage_skill")
        return LearnedNoteView(note, enabled=on)

    @subcommand("learned")
    def _learned(self, args):
        """The learned skills: versions, the last author and change, and whether each is listed."""
        return LearnedView(self.session.learning.summary(), self.session.learning.enabled)

    def _skill_history(self, name: str):
        """`%skills history NAME`: the versions of a learned skill (the `history` subcommand routes here)."""
        return LearnedHistoryView(name, self.session.learning.history(name))

    @subcommand("diff")
    @argument("name", help="a learned skill")
    @argument("first", type=positive, metavar="V1", help="a version")
    @argument("second", type=positive, metavar="V2", help="another version")
    def _diff(self, args):
        """A unified diff per file between two versions of a learned skill."""
        changed = self.session.learning.diff(args.name, args.first, args.second)
        return LearnedDiffView(args.name, args.first, args.second, changed)

    @subcommand("revert")
    @argument("name", help="a learned skill")
    @argument("version", type=positive, metavar="V", help="the version whose files come back")
    def _revert(self, args):
        """A new version of a learned skill holding version V's files (written by you: the history keeps both)."""
        written = self.session.learning.revert(args.name, args.version)
        return LearnedNoteView(f"{args.name}: version {written.version} holds the files of version {args.version}",
                               name=args.name, version=written.version, reverted_to=args.version)

    @subcommand("promote")
    @argument("name", help="a learned skill")
    @argument("path", nargs="?", help="the new skill folder (default ./skills/NAME); never overwritten")
    def _promote(self, args):
        """Copy a learned skill's current version into a folder as a normal skill (a file skill from then on)."""
        target = self.session.show_path(self.session.learning.promote(args.name, args.path))
        return LearnedNoteView(f"{args.name} copied to {target}: a normal skill folder now, which hides the learned "
                               "one wherever that folder is a source", name=args.name, path=target)
