"""The `skills-magic` command (also `python -m skills_magic`): parse arguments, call the core, print.

  skills-magic validate PATH...           exit 0 all valid, 1 something invalid, 2 usage error
  skills-magic to-prompt PATH...          <available_skills> XML (validated first; same bytes as skills-ref)
  skills-magic list PATH... [--json]      the grouped listing of the skills found under the paths
  skills-magic lint PATH... [--json]      description lint (exit 0 clean, 1 findings, 2 usage)
  skills-magic ledger check [--db FILE] [--plan SLUG] | NOTEBOOK.ipynb
                                          exit 0 all judged, 1 a prediction is open, 2 could not read (or usage)
  skills-magic ledger export [--db FILE] [--plan SLUG] [--format jsonl|md]
  skills-magic run-notebook NOTEBOOK...   execute notebooks headless and print their outputs
                                          (--output-dir DIR: save executed copies; --inplace: refresh them)
  skills-magic trust [FILE] [--revoke]    show every rule of a project's skills-policy.yaml (default: here) and
                                          trust these exact bytes, or forget them (exit 2: no such file)
  skills-magic apply RUN [PATH...]        copy what a sandboxed run wrote in this folder (copy-on-write until
                                          now) into it (exit 0 all applied, 1 something refused, 2 no such run)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

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
    run = sub.add_parser("run-notebook", help="execute notebooks headless and print their text outputs")
    run.add_argument("notebooks", nargs="+")
    run.add_argument("--timeout", type=int, default=600)
    output = run.add_mutually_exclusive_group()
    output.add_argument("--inplace", action="store_true", help="save the outputs into the notebook (no timing metadata)")
    output.add_argument("--output-dir", help="write the executed notebooks into this folder")
    trust = sub.add_parser("trust", help="trust the exact bytes of a project's skills-policy.yaml (its allow rules apply)")
    trust.add_argument("file", nargs="?", help="the policy file (default: skills-policy.yaml here)")
    trust.add_argument("--revoke", action="store_true", help="forget it: its allow rules are inert again")
    apply = sub.add_parser("apply", help="apply what a sandboxed run wrote in this folder (its run id: run-ab12cd34)")
    apply.add_argument("run", help="the run's id, the name of its folder in .skills/runs/")
    apply.add_argument("files", nargs="*", help="only these changed files (or folders), relative to this folder")
    return parser


def _missing(paths: Sequence[str]) -> list[str]:
    return [p for p in paths if not os.path.exists(p)]


def _validate(args) -> int:
    from skills_magic.notebook.views import VerdictsView, diagnostic_line
    from skills_magic.session import display_path
    from skills_magic.skills.validate import validate_path

    verdicts = [v for p in args.paths for v in validate_path(p)]
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


def _skill_folders(paths: Sequence[str]) -> list[str]:
    from skills_magic.skills.find import find_skill_files
    from skills_magic.skills.skill import find_skill_md

    folders = []
    for p in paths:
        if os.path.isfile(p):
            folders.append(os.path.dirname(os.path.abspath(p)))
        elif find_skill_md(p) is not None:
            folders.append(os.path.abspath(p))
        else:
            folders += [os.path.dirname(f) for f in find_skill_files(p)]
    return folders


def _to_prompt(args) -> int:
    from skills_magic.skills.listing import xml_listing
    from skills_magic.skills.skill import find_skill_md
    from skills_magic.skills.validate import load_skill, validate_folder

    folders = _skill_folders(args.paths)
    invalid = [v for v in map(validate_folder, folders) if not v.valid]
    if invalid:
        for v in invalid:
            for d in v.problems:
                print(f"Error: {d}", file=sys.stderr)
        return EXIT_INVALID
    skills = [load_skill(find_skill_md(f)).skill for f in folders]

    def location(skill) -> str:
        return os.path.join(os.path.realpath(skill.folder), os.path.basename(skill.path))

    print(xml_listing(skills, None, location, name=lambda skill: skill.written_name)[1])
    return EXIT_OK


def _list(args) -> int:
    from skills_magic.skills.catalog import Catalog, Source
    from skills_magic.notebook.views import ListingView
    from skills_magic.skills.listing import text_listing
    from skills_magic.session import display_path

    catalog = Catalog([Source("path", os.path.abspath(p), explicit=True) for p in args.paths])
    scan = catalog.scan()
    listing, text = text_listing(scan.skills, args.budget or None)
    view = ListingView(scan, listing, text, display_path)
    print(json.dumps(view.data(), indent=1, ensure_ascii=False) if args.json else view.text())
    return EXIT_OK


def _run_notebook(args) -> int:
    try:
        import nbformat
        from nbclient import NotebookClient
    except ImportError:
        print("run-notebook needs nbclient and ipykernel: pip install 'skills-magic[notebook]'", file=sys.stderr)
        return EXIT_USAGE
    written = []
    for path in args.notebooks:
        notebook = nbformat.read(path, as_version=4)
        folder = os.path.dirname(os.path.abspath(path))  # a notebook runs in its own folder, as Jupyter runs it
        print(f"=== {path}")
        # record_timing=False: no per-cell timestamps, so a refreshed notebook differs only where outputs changed
        NotebookClient(notebook, timeout=args.timeout, record_timing=False, resources={"metadata": {"path": folder}}).execute()
        for cell in notebook.cells:
            if cell.cell_type != "code":
                continue
            print(f">>> {cell.source}")
            for output in cell.get("outputs", []):
                text = output.get("text") or output.get("data", {}).get("text/plain", "")
                if text:
                    print(text.rstrip("\n"))
        if args.inplace:
            nbformat.write(notebook, path)
        elif args.output_dir:
            os.makedirs(args.output_dir, exist_ok=True)
            target = os.path.join(args.output_dir, os.path.basename(path))
            nbformat.write(notebook, target)
            written.append(target)
    if written:
        print("executed notebooks, with their outputs (open them in Jupyter):")
        for target in written:
            print(f"  {target}")
    return EXIT_OK


LEDGER_MIME = "application/vnd.skills-magic.ledger+json"
RUN_MIME = "application/vnd.skills-magic.run+json"


def _ledger_database(path: str | None):
    from skills_magic.records.db import Database, resolve_path

    path = path or resolve_path(os.getcwd())
    if not os.path.lexists(path):
        raise FileNotFoundError(path)
    return Database(path, read_only=True)  # a check only reads: it works in a read-only folder, and never migrates


class _NotebookUnreadable(Exception):
    """A notebook file that is not readable JSON of a notebook; exit 2, like a database that cannot be read."""


def _listed(value, key: str) -> list:
    found = value.get(key) if isinstance(value, dict) else None
    return found if isinstance(found, list) else []


def _notebook_entries(path: str) -> list[dict]:
    import json as json_module

    try:
        with open(path, encoding="utf-8") as handle:
            notebook = json_module.load(handle)
    except (OSError, ValueError) as error:  # ValueError: not UTF-8, not JSON
        reason = getattr(error, "strerror", None) or str(error).splitlines()[0]
        raise _NotebookUnreadable(f"cannot read the notebook {path}: {reason}") from None
    if not isinstance(notebook, dict):
        raise _NotebookUnreadable(f"cannot read the notebook {path}: it is JSON but not a notebook (no cells)")
    found = []
    for cell in _listed(notebook, "cells"):
        for output in _listed(cell, "outputs"):
            data = output.get("data") if isinstance(output, dict) else None
            data = data if isinstance(data, dict) else {}
            ledger = data.get(LEDGER_MIME)
            if isinstance(ledger, dict):
                found += [dict(e, plan=e.get("plan") or ledger.get("plan")) for e in _listed(ledger, "entries")
                          if isinstance(e, dict)]
            run = data.get(RUN_MIME)  # entries a model wrote through the experiment tool during a run
            if isinstance(run, dict):
                found += [e for e in _listed(run, "ledger_entries") if isinstance(e, dict)]
    return found


def _ledger(args) -> int:
    import sqlite3

    from skills_magic.errors import DatabaseUnreadable
    from skills_magic.records.ledger import Ledger, LedgerError, gate_message, open_from_entries, plan_name

    try:
        plan = plan_name(args.plan) if args.plan else None
        if args.ledger_command == "check" and args.notebook:
            plans = open_from_entries(_notebook_entries(args.notebook))
            source = args.notebook
        else:
            ledger = Ledger(_ledger_database(args.db))
            # a database no kernel has written a ledger to (read-only: not migrated) has no entries, not an error
            recorded = ledger.database.has_table("ledger_entries")
            if args.ledger_command == "export":
                return _export(ledger, plan, args.format) if recorded else EXIT_OK
            plans = {p: ledger.state(p, limit=0, all_open=True).open for p in ledger.plans()} if recorded else {}
            source = ledger.database.path
    except FileNotFoundError as error:
        print(f"skills-magic: no ledger at {error}", file=sys.stderr)
        return EXIT_USAGE
    except (LedgerError, DatabaseUnreadable, _NotebookUnreadable) as error:
        print(f"skills-magic: {error}", file=sys.stderr)
        return EXIT_USAGE
    except sqlite3.Error as error:  # a readable SQLite file that is not (or no longer) shaped like the ledger
        print(f"skills-magic: cannot read the ledger in {args.db or 'the database'}: {error}", file=sys.stderr)
        return EXIT_USAGE
    if plan is not None:
        plans = {plan: plans.get(plan, [])} if plan in plans else {}
        if not plans:
            print(f"skills-magic: {source} has no plan {plan}", file=sys.stderr)
            return EXIT_USAGE
    failing = {p: open_ for p, open_ in plans.items() if open_}
    for p, open_ in sorted(plans.items()):
        print(gate_message(p, open_) if open_ else f"{p}: 0 open predictions")
    if not plans:
        if args.ledger_command == "check" and args.notebook:
            # an executed notebook that should carry a record and carries none is not a pass
            print(f"{source}: no ledger outputs (was the notebook executed, and did its %ledger cells run?)", file=sys.stderr)
            return EXIT_INVALID
        print(f"{source}: no ledger entries")
    return EXIT_INVALID if failing else EXIT_OK


def _export(ledger, plan: str | None, fmt: str) -> int:
    entries = sorted(ledger.entries(plan), key=lambda e: e.plan) if fmt == "md" else list(ledger.entries(plan))  # stable
    if fmt == "jsonl":
        for e in entries:
            print(json.dumps({**e.to_dict(), "at": e.at}, ensure_ascii=False, sort_keys=True))
        return EXIT_OK
    current = None
    for e in entries:
        if e.plan != current:
            current = e.plan
            print(f"\n## {current}\n" if current != entries[0].plan else f"## {current}\n")
        print(f"- **{e.label}** ({e.kind}) {e.summary()[len(e.label) + 1:]}")
    return EXIT_OK


def _lint(args) -> int:
    from skills_magic.skills.lint import exit_code, lint_path
    from skills_magic.session import display_path

    results = [item for path in args.paths for item in lint_path(path)]
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
    from skills_magic.errors import SkillsMagicError
    from skills_magic.safety.policy import POLICY_FILE
    from skills_magic.session import SkillsSession, display_path

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
    from skills_magic.errors import SkillsMagicError
    from skills_magic.session import SkillsSession

    try:
        report = SkillsSession(sources=[], cwd=os.getcwd()).apply(args.run, args.files)
    except SkillsMagicError as error:
        print(f"skills-magic: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(ApplyView(report).text())
    return EXIT_OK if report.ok else EXIT_INVALID


COMMANDS = {"lint": _lint, "validate": _validate, "to-prompt": _to_prompt, "list": _list, "ledger": _ledger,
            "run-notebook": _run_notebook, "trust": _trust, "apply": _apply}


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
