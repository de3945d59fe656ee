"""The notebook's magics, one IPython Magics class per subject over one shared SkillsSession: `%skills`
(magics.skills), `%%skill` (magics.run) and `%ledger` (magics.ledger). `SkillsMagics` is the three together over the
session it makes from the IPython configuration (`c.SkillsMagics.paths`, `.allow`, `.deny`), with the stdin asker;
`register` and `unregister` add it to a shell and take it away (`%load_ext skills_magic`, `%unload_ext`)."""

from __future__ import annotations

import os

from IPython.core.magic import magic_kinds, magics_class
from traitlets import List, Unicode

from skills_magic.notebook.magics.ledger import LEDGER_USAGE, LedgerMagics  # noqa: F401  (re-exported: its home before the split)
from skills_magic.notebook.magics.run import (  # noqa: F401  (re-exported: its home before the split)
    RUN_USAGE, STREAM_UPDATE_SECONDS, VERIFY_USAGE, RunMagics, split_script_words,
)
from skills_magic.notebook.magics.skills import SHORT_USAGE, SOURCE_LABELS, SkillsCommandMagics  # noqa: F401  (re-exported: its home before the split)
from skills_magic.notebook.views.base import JSONResult  # noqa: F401  (re-exported: its home before the split)
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

    def _ask(self, request):
        """A person at the notebook decides (input() raises where nobody can: the gate then denies)."""
        answer = input(f"{request.describe()}\nAllow? [o]nce / [a]lways for this skill and path / [d]eny: ")
        return {"o": "once", "once": "once", "a": "always", "always": "always"}.get(answer.strip().lower(), "deny")


# the magics of every subject (`@magics_class` gives a class only the magics defined in its own body)
SkillsMagics.magics = {kind: {name: method for subject in SUBJECTS for name, method in subject.magics[kind].items()}
                       for kind in magic_kinds}


def register(ipython) -> None:
    ipython.register_magics(SkillsMagics)
    if os.environ.get("ANTHROPIC_API_KEY"):
        from skills_magic.models.anthropic import warm_up

        warm_up()  # import the SDK in the background now, so the first run does not wait 1.5 s for it


def unregister(ipython) -> None:
    if ipython.magics_manager.registry.pop("SkillsMagics", None) is not None:
        for kind, names in SkillsMagics.magics.items():
            for name in names:
                ipython.magics_manager.magics[kind].pop(name, None)
