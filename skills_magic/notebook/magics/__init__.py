"""The notebook's magics, one IPython Magics class per subject over one shared SkillsSession: `%skills`
(magics.skills), `%%skill` (magics.run) and `%ledger` (magics.ledger). `SkillsMagics` is the three together over the
session it makes from the IPython configuration (`c.SkillsMagics.paths`, `.allow`, `.deny`), with the stdin asker;
`register` and `unregister` add it to a shell and take it away (`%load_ext skills_magic`, `%unload_ext`), with the
display formatter that shows a RunResult as its RunView."""

from __future__ import annotations

import os

from IPython.core.magic import magic_kinds, magics_class
from traitlets import List, Unicode

from skills_magic.notebook.magics.ledger import LEDGER_USAGE, LedgerMagics  # noqa: F401  (re-exported: its home before the split)
from skills_magic.notebook.magics.run import (  # noqa: F401  (re-exported: its home before the split)
    RUN_USAGE, STREAM_UPDATE_SECONDS, VERIFY_USAGE, RunMagics, read_run_line,
)
from skills_magic.notebook.magics.skills import SHORT_USAGE, SOURCE_LABELS, SkillsCommandMagics  # noqa: F401  (re-exported: its home before the split)
from skills_magic.notebook.views.base import JSONResult  # noqa: F401  (re-exported: its home before the split)
from skills_magic.notebook.views.runs import run_bundle
from skills_magic.runs.result import RunResult
from skills_magic.session import SkillsSession

SUBJECTS = (SkillsCommandMagics, RunMagics, LedgerMagics)  # one instance holds them all: no two share a method name


@magics_class
class SkillsMagics(SkillsCommandMagics, RunMagics, LedgerMagics):
    """`%skills`, `%%skill` and `%ledger` over one session; a person at the notebook answers permission prompts."""

    paths = List(Unicode(), help="Extra folders searched for skills, after session-added ones.").tag(config=True)
    allow = List(Unicode(), help="Permission rules SKILL:PATH that allow scripts to run.").tag(config=True)
    deny = List(Unicode(), help="Permission rules SKILL:PATH that forbid scripts to run (they win).").tag(config=True)

    def __init__(self, shell=None, **kwargs):
        super().__init__(shell=shell, **kwargs)
        self.session = SkillsSession(extra_paths=self.paths, allow=self.allow, deny=self.deny)
        self.session.asker = self._ask
        if shell is not None:  # each cell's error, for a task's {Err[n]}; `unregister` takes it away again
            shell.events.register("post_run_cell", self.remember_error)

    def _ask(self, request):
        """A person at the notebook decides (input() raises where nobody can: the gate then denies)."""
        answer = input(f"{request.describe()}\nAllow? [o]nce / [a]lways for this skill and path / [d]eny: ")
        return {"o": "once", "once": "once", "a": "always", "always": "always"}.get(answer.strip().lower(), "deny")


# the magics of every subject (`@magics_class` gives a class only the magics defined in its own body)
SkillsMagics.magics = {kind: {name: method for subject in SUBJECTS for name, method in subject.magics[kind].items()}
                       for kind in magic_kinds}


def register(ipython) -> None:
    ipython.register_magics(SkillsMagics)
    # a RunResult shows as its RunView wherever it is displayed: `session.run(...)` in a cell, `r` after `--as r`
    ipython.display_formatter.mimebundle_formatter.for_type(RunResult, run_bundle)
    if os.environ.get("ANTHROPIC_API_KEY"):
        from skills_magic.models.anthropic import warm_up

        warm_up()  # import the SDK in the background now, so the first run does not wait 1.5 s for it


def unregister(ipython) -> None:
    ipython.display_formatter.mimebundle_formatter.pop(RunResult, None)
    magics = ipython.magics_manager.registry.pop("SkillsMagics", None)
    if magics is not None:
        if magics.remember_error in ipython.events.callbacks["post_run_cell"]:  # not there: a test's own instance
            ipython.events.unregister("post_run_cell", magics.remember_error)
        for kind, names in SkillsMagics.magics.items():
            for name in names:
                ipython.magics_manager.magics[kind].pop(name, None)
