"""The `%skills` magics: parse the line, call the session, return a view. No logic lives here (usage: `%skills?`)."""

from __future__ import annotations

import argparse
import os
import shlex
import time

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from traitlets import List, Unicode

from skills_magic import display
from skills_magic.errors import SkillsMagicError
from skills_magic.session import SkillsSession
from skills_magic.skill import CODES



SHORT_USAGE = "usage: %skills list|show|validate|add|sources|diagnostics ... (`%skills?` for details)"
SOURCE_LABELS = ("session", "path", "project", "user", "bundled")


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (one line in the notebook) instead of printing and exiting."""

    def error(self, message):
        raise UsageError(f"{message}; {SHORT_USAGE}")

    def exit(self, status=0, message=None):
        raise UsageError(SHORT_USAGE)


def _budget(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"a budget is a number of characters (0: no budget), not {value}")
    return value


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="skills", add_help=False)
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    listing = sub.add_parser("list", add_help=False)
    listing.add_argument("--source", choices=SOURCE_LABELS, help="only skills from this source")
    listing.add_argument("--budget", type=_budget, help="character budget (default 8000); 0 shows everything")
    listing.add_argument("--json", action="store_true", help="return the listing as JSON data")
    show = sub.add_parser("show", add_help=False)
    show.add_argument("name")
    validate = sub.add_parser("validate", add_help=False)
    validate.add_argument("target", nargs="?")
    add = sub.add_parser("add", add_help=False)
    add.add_argument("path")
    sub.add_parser("sources", add_help=False)
    diagnostics = sub.add_parser("diagnostics", add_help=False)
    diagnostics.add_argument("--severity", choices=["error", "warning", "info"])
    diagnostics.add_argument("--code", choices=sorted(CODES))
    diagnostics.add_argument("--json", action="store_true")
    return parser


class JSONResult(dict):
    """`--json`: the view's JSON data as a plain dict (displayed as JSON, usable as data)."""

    def _repr_mimebundle_(self, include=None, exclude=None):
        import json

        return {"application/json": dict(self), "text/plain": json.dumps(self, indent=1, ensure_ascii=False)}, {}


@magics_class
class SkillsMagics(Magics):
    """`%skills`: list, show, validate and add Agent Skills."""

    paths = List(Unicode(), help="Extra folders searched for skills, after session-added ones.").tag(config=True)

    def __init__(self, shell=None, **kwargs):
        super().__init__(shell=shell, **kwargs)
        self.session = SkillsSession(extra_paths=self.paths)
        self.parser = _build_parser()

    @line_magic
    def skills(self, line: str):
        """List, show, validate and add Agent Skills.

        %skills list [--source LABEL] [--budget N] [--json]   the catalog, grouped by source, under a character budget
        %skills show NAME                                     the annotation line and the body verbatim
        %skills validate [NAME|PATH]                          strict verdicts (the specification, exactly)
        %skills add PATH                                      add a skill folder or a collection, ahead of the others
        %skills sources                                       the sources in precedence order
        %skills diagnostics [--severity S] [--code C] [--json]
        """
        try:
            argv = shlex.split(line)
        except ValueError as error:
            raise UsageError(f"{error}; {SHORT_USAGE}") from None
        if not argv:
            raise UsageError(SHORT_USAGE)
        args = self.parser.parse_args(argv)
        try:
            return getattr(self, f"_{args.command}")(args)
        except SkillsMagicError as error:
            raise UsageError(str(error)) from None

    def _show_path(self, path: str) -> str:
        return self.session.show_path(path)

    def _list(self, args):
        started = time.perf_counter()
        scan, listing, text = self.session.listing(budget=args.budget, source=args.source)
        view = display.ListingView(scan, listing, text, self._show_path, time.perf_counter() - started)
        return JSONResult(view.data()) if args.json else view

    def _show(self, args):
        return display.SkillView(self.session.skill(args.name), self._show_path)

    def _validate(self, args):
        return display.VerdictsView(self.session.validate(args.target), self._show_path)

    def _add(self, args):
        source, skills = self.session.add(args.path)
        inside = source.root.rstrip(os.sep) + os.sep
        problems = [d for d in self.session.diagnostics() if d.path == source.root or d.path.startswith(inside)]
        return display.AddedView(source, skills, problems, self._show_path)

    def _sources(self, args):
        return display.SourcesView(self.session.sources(), self._show_path)

    def _diagnostics(self, args):
        view = display.DiagnosticsView(self.session.diagnostics(args.severity, args.code), self._show_path)
        return JSONResult(view.data()) if args.json else view


def register(ipython) -> None:
    ipython.register_magics(SkillsMagics)


def unregister(ipython) -> None:
    magics = ipython.magics_manager.registry.get("SkillsMagics")
    if magics is not None:
        ipython.magics_manager.registry.pop("SkillsMagics", None)
        ipython.magics_manager.magics["line"].pop("skills", None)
