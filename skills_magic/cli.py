"""The `skills-magic` command (also `python -m skills_magic`): parse arguments, call the session, print.

  skills-magic validate PATH...           exit 0 all valid, 1 something invalid, 2 usage error
  skills-magic to-prompt PATH...          <available_skills> XML (validated first; same bytes as skills-ref)
  skills-magic list PATH... [--json]      the grouped listing of the skills found under the paths
  skills-magic lint PATH... [--json]      description lint (exit 0 clean, 1 findings, 2 usage)
  skills-magic ledger check [--db FILE] [--plan SLUG] | NOTEBOOK.ipynb
                                          exit 0 all judged, 1 a prediction is open, 2 could not read (or usage)
  skills-magic ledger export [--db FILE] [--plan SLUG] [--format jsonl|md]
  skills-magic run-notebook NOTEBOOK...   execute notebooks headless and print their outputs
                                          (--output-dir DIR: save executed copies; --inplace: refresh them;
                                          -p NAME VALUE: a parameter, after the cell tagged `parameters`)
                                          exit 0 all ran, 1 a cell failed (one line; the partial notebook
                                          is written), 2 usage error
  skills-magic trust [FILE] [--revoke]    show every rule of a project's skills-policy.yaml (default: here) and
                                          trust these exact bytes, or forget them (exit 2: no such file)
  skills-magic apply RUN [PATH...]        copy what a sandboxed run wrote in this folder (copy-on-write until
                                          now) into it (exit 0 all applied, 1 something refused, 2 no such run)
  skills-magic logs [--json] [--skill S] [--since DATE] [--limit N] [--kind K]
                                          the run log: runs, votes, eval runs and batch requests, newest first
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from skills_magic.errors import SkillsMagicError
from skills_magic.paths import display_path
from skills_magic.runs.notebooks import CellFailed, NotebookRunnerMissing
from skills_magic.session import SkillsSession
from skills_magic.skills.catalog import Source

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
LEDGER_EXIT_CODES = ("exit codes: 0 every prediction is judged, 1 a prediction is open (or a notebook has no ledger "
                     "outputs), 2 the database or notebook could not be read (or a usage error)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="skills-magic", description="Find, validate and list Agent Skills.")
    sub = parser.add_subparsers(dest="command", required=True)
    validate = sub.add_parser("validate", help="validate skill folders, SKILL.md files or collections")
    validate.add_argument("paths", nargs="+")
    validate.add_argument("--json", action="store_true")
    prompt = sub.add_parser("to-prompt", help="print <available_skills> XML for skill folders")
    prompt.add_argument("paths", nargs="+")
    listing = sub.add_parser("list", help="list the skills found under folders")
    listing.add_argument("paths", nargs="+")
    listing.add_argument("--json", action="store_true")
    listing.add_argument("--budget", type=int, default=0, help="character budget (0: no budget)")
    lint = sub.add_parser("lint", help="lint skill descriptions (third person, what and when, key terms first, limits)")
    lint.add_argument("paths", nargs="+")
    lint.add_argument("--json", action="store_true")
    ledger = sub.add_parser("ledger", help="check or export the experiment ledger")
    ledger_sub = ledger.add_subparsers(dest="ledger_command", required=True)
    check = ledger_sub.add_parser(
        "check", help="exit 1 while a prediction is open (from the database or a notebook)",
        description="The ledger gate, on the project's database (opened read-only) or an executed notebook.",
        epilog=LEDGER_EXIT_CODES)
    check.add_argument("notebook", nargs="?", help="an executed .ipynb: rebuild the ledger from its outputs")
    check.add_argument("--db", help="the SQLite file (default .skills/skills.sqlite or SKILLS_MAGIC_DB)")
    check.add_argument("--plan", help="only this plan (SLUG or sci.SLUG)")
    export = ledger_sub.add_parser("export", help="write every entry to stdout",
                                   epilog="exit codes: 0 written, 2 the database could not be read (or a usage error)")
    export.add_argument("--db")
    export.add_argument("--plan")
    export.add_argument("--format", choices=["jsonl", "md"], default="jsonl")
    run = sub.add_parser("run-notebook", help="execute notebooks headless and print their text outputs",
                         epilog="exit codes: 0 every cell ran, 1 a cell failed (its error in one line; the notebook "
                                "executed up to it is written to --output-dir, in place with --inplace, else beside "
                                "it as NAME.failed.ipynb), 2 a usage error")
    run.add_argument("notebooks", nargs="+")
    run.add_argument("--timeout", type=int, default=600)
    run.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                     help="set NAME = VALUE in a new cell after the cell tagged `parameters` (papermill's "
                          "convention); VALUE is a Python literal when it is one (3, 0.5, [1, 2], None), else a string")
    output = run.add_mutually_exclusive_group()
    output.add_argument("--inplace", action="store_true", help="save the outputs into the notebook (no timing metadata)")
    output.add_argument("--output-dir", help="write the executed notebooks into this folder")
    trust = sub.add_parser("trust", help="trust the exact bytes of a project's skills-policy.yaml (its allow rules apply)")
    trust.add_argument("file", nargs="?", help="the policy file (default: skills-policy.yaml here)")
    trust.add_argument("--revoke", action="store_true", help="forget it: its allow rules are inert again")
    apply = sub.add_parser("apply", help="apply what a sandboxed run wrote in this folder (its run id: run-ab12cd34)")
    apply.add_argument("run", help="the run's id, the name of its folder in .skills/runs/")
    apply.add_argument("files", nargs="*", help="only these changed files (or folders), relative to this folder")
    logs = sub.add_parser("logs", help="the run log: every run, vote, eval run and batch request, newest first",
                          epilog="exit codes: 0 listed, 2 the database could not be read (or a usage error)")
    logs.add_argument("--json", action="store_true", help="the rows as JSON (every column but the bodies)")
    logs.add_argument("--skill")
    logs.add_argument("--since", metavar="DATE", help="rows at or after this date (UTC), e.g. 2026-12-01")
    logs.add_argument("--limit", type=int, help="the newest N rows (default 50; 0: all)")
    logs.add_argument("--kind", choices=["run", "vote", "eval", "batch"])
    return parser


def _missing(paths: Sequence[str]) -> list[str]:
    return [p for p in paths if not os.path.exists(p)]


def _session(sources=None) -> SkillsSession:
    """The session every command goes through, in this folder: no catalog unless the command names one."""
    return SkillsSession(sources=sources if sources is not None else [], cwd=os.getcwd())


def _validate(args) -> int:
    from skills_magic.notebook.views import VerdictsView, diagnostic_line

    session = _session()
    verdicts = [v for p in args.paths for v in session.validate(p)]
    view = VerdictsView(verdicts, display_path)
    if args.json:
        print(json.dumps(view.data(), indent=1, ensure_ascii=False))
    else:
        for v in verdicts:
            print(f"{'Valid skill' if v.valid else 'Invalid skill'}: {display_path(v.folder)}")
            for d in v.diagnostics:
                print(f"  {diagnostic_line(d, display_path)}")
        if len(verdicts) > 1:
            print(f"{sum(v.valid for v in verdicts)} of {len(verdicts)} valid")
    return EXIT_OK if view.valid else EXIT_INVALID


def _to_prompt(args) -> int:
    session = _session()
    found = session.prompt_listing(args.paths)
    if isinstance(found, list):  # the verdicts of the invalid skills: nothing is listed
        for v in found:
            for d in v.problems:
                print(f"Error: {d}", file=sys.stderr)
        return EXIT_INVALID
    print(found)
    return EXIT_OK


def _list(args) -> int:
    from skills_magic.notebook.views import ListingView

    session = _session([Source("path", os.path.abspath(p), explicit=True) for p in args.paths])
    scan, listing, text = session.listing(args.budget)
    view = ListingView(scan, listing, text, display_path)
    print(json.dumps(view.data(), indent=1, ensure_ascii=False) if args.json else view.text())
    return EXIT_OK


def _run_notebook(args) -> int:
    def shown(path: str, cells) -> None:
        print(f"=== {path}")
        for cell in cells:
            print(f">>> {cell.source}")
            for text in cell.texts:
                print(text.rstrip("\n"))

    try:
        written = _session().run_notebooks(args.notebooks, timeout=args.timeout, inplace=args.inplace,
                                           output_dir=args.output_dir, parameters=args.parameter, on_notebook=shown)
    except NotebookRunnerMissing as error:
        print(error, file=sys.stderr)
        return EXIT_USAGE
    except CellFailed as failure:  # the cells that ran, then the failure as one line (the traceback is in the file)
        shown(failure.path, failure.cells)
        print(f"skills-magic: {failure}", file=sys.stderr)
        print(f"skills-magic: the notebook as executed up to that cell: {failure.partial}", file=sys.stderr)
        return EXIT_INVALID
    except SkillsMagicError as error:  # a bad -p NAME, a notebook without a `parameters` cell
        print(f"skills-magic: {error}", file=sys.stderr)
        return EXIT_USAGE
    if written:
        print("executed notebooks, with their outputs (open them in Jupyter):")
        for target in written:
            print(f"  {target}")
    return EXIT_OK


def _ledger(args) -> int:
    from skills_magic.records.ledger import gate_message

    session = _session()
    notebook = args.notebook if args.ledger_command == "check" else None
    try:
        if args.ledger_command == "export":
            for line in session.ledger_export(args.db, args.plan, args.format):
                print(line)
            return EXIT_OK
        check = session.ledger_check(notebook=notebook, db=args.db, plan=args.plan)
    except SkillsMagicError as error:  # no ledger there, an unreadable database or notebook, a bad plan name
        print(f"skills-magic: {error}", file=sys.stderr)
        return EXIT_USAGE
    for plan, open_ in sorted(check.plans.items()):
        qualified = plan in check.several_sessions  # a plan of several sessions: `2:P1` says whose P1 is open
        print(gate_message(plan, open_, qualified) if open_ else f"{plan}: 0 open predictions")
    if not check.plans:
        if check.from_notebook:
            # an executed notebook that should carry a record and carries none is not a pass
            print(f"{check.source}: no ledger outputs (was the notebook executed, and did its %ledger cells run?)",
                  file=sys.stderr)
            return EXIT_INVALID
        print(f"{check.source}: no ledger entries")
    return EXIT_INVALID if check.failing else EXIT_OK


def _lint(args) -> int:
    from skills_magic.skills.lint import exit_code

    results = _session().lint_paths(args.paths)
    if args.json:
        print(json.dumps({display_path(label): [{"rule": f.rule, "severity": f.severity, "message": f.message} for f in found]
                          for label, found in results}, indent=1, ensure_ascii=False))
    else:
        for label, found in results:
            shown = display_path(label)
            if not found:
                print(f"clean: {shown}")
            for f in found:
                print(f"{shown}: {f.severity} [{f.rule}] {f.message}")
        clean = sum(1 for _, found in results if not found)
        print(f"{clean} of {len(results)} descriptions clean")
    return exit_code(results)


def _trust(args) -> int:
    from skills_magic.notebook.views import TrustView
    from skills_magic.safety.policy import POLICY_FILE

    path = os.path.abspath(args.file or POLICY_FILE)
    try:
        report = SkillsSession(sources=[], cwd=os.path.dirname(path)).trust(os.path.basename(path), revoke=args.revoke)
    except SkillsMagicError as error:
        print(f"skills-magic: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(TrustView(report, display_path).text())
    return EXIT_OK


def _apply(args) -> int:
    from skills_magic.notebook.views import ApplyView

    try:
        report = _session().apply(args.run, args.files)
    except SkillsMagicError as error:
        print(f"skills-magic: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(ApplyView(report).text())
    return EXIT_OK if report.ok else EXIT_INVALID


def _logs(args) -> int:
    from skills_magic.notebook.views.runlog import DEFAULT_LIMIT, RunLogView

    limit = DEFAULT_LIMIT if args.limit is None else args.limit or None
    try:
        rows = _session().runs.rows(kind=args.kind, skill=args.skill, since=args.since, limit=limit)
    except SkillsMagicError as error:  # an unreadable database, a --since that is no date
        print(f"skills-magic: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(rows, indent=1, ensure_ascii=False) if args.json else RunLogView(rows).text())
    return EXIT_OK


COMMANDS = {"lint": _lint, "validate": _validate, "to-prompt": _to_prompt, "list": _list, "ledger": _ledger,
            "run-notebook": _run_notebook, "trust": _trust, "apply": _apply, "logs": _logs}


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # argparse prints its usage message; 2 is the usage exit code
        return int(stop.code or 0)
    paths = getattr(args, "paths", None) or getattr(args, "notebooks", None) or (
        [args.notebook] if getattr(args, "notebook", None) else [])
    missing = _missing(paths)
    if missing:
        for p in missing:
            print(f"skills-magic: no such file or folder: {p}", file=sys.stderr)
        return EXIT_USAGE
    return COMMANDS[args.command](args)
