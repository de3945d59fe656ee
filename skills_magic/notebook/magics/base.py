"""The base of the notebook's Magics classes: one SkillsSession that the `%skills`, `%%skill` and `%ledger` classes
share (`SkillsMagics` combines them over the session it makes; each also runs alone over a session it is given)."""

from __future__ import annotations

from IPython.core.magic import Magics

from skills_magic.session import SkillsSession


class SessionMagics(Magics):
    """A Magics class over one session: its magics parse a line, call the session and return a view."""

    session: SkillsSession

    def __init__(self, shell=None, session: SkillsSession | None = None, **kwargs):
        super().__init__(shell=shell, **kwargs)
        if session is not None:
            self.session = session
        self.cell_errors: dict[int, str] = {}  # execution count -> the error that cell raised: a task's {Err[n]}

    def _has_front_end(self) -> bool:
        """A kernel is attached: a front end renders widgets and displays (a plain IPython shell has none)."""
        return getattr(self.shell, "kernel", None) is not None

    def _interactive(self) -> bool:
        # someone is at the notebook when the kernel may ask them for input (nbclient, nbval and papermill say no)
        kernel = getattr(self.shell, "kernel", None)
        return bool(kernel is not None and getattr(kernel, "_allow_stdin", False))
