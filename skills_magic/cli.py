"""The `skills-magic` command (also `python -m skills_magic`): parse arguments, call the core, print.

  skills-magic validate PATH...           exit 0 all valid, 1 something invalid, 2 usage error
  skills-magic to-prompt PATH...          <available_skills> XML (validated first; same bytes as skills-ref)
  skills-magic list PATH... [--json]      the grouped listing of the skills found under the paths
  skills-magic run-notebook NOTEBOOK      execute a notebook headless and print its outputs (--inplace: save them)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


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
    run = sub.add_parser("run-notebook", help="execute a notebook headless and print its text outputs")
    run.add_argument("notebook")
    run.add_argument("--timeout", type=int, default=600)
    run.add_argument("--inplace", action="store_true", help="save the outputs into the notebook (no timing metadata)")
    return parser


def _missing(paths: Sequence[str]) -> list[str]:
    return [p for p in paths if not os.path.exists(p)]


def _validate(args) -> int:
    from skills_magic.display import VerdictsView, diagnostic_line
    from skills_magic.session import display_path
    from skills_magic.validate import validate_path

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
    from skills_magic.catalog import find_skill_files
    from skills_magic.skill import find_skill_md

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
    from skills_magic.listing import xml_listing
    from skills_magic.skill import find_skill_md
    from skills_magic.validate import load_skill, validate_folder

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
    from skills_magic.catalog import Catalog, Source
    from skills_magic.display import ListingView
    from skills_magic.listing import text_listing
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
    notebook = nbformat.read(args.notebook, as_version=4)
    folder = os.path.dirname(os.path.abspath(args.notebook))
    # record_timing=False: no per-cell timestamps, so a refreshed notebook differs only where outputs changed
    NotebookClient(notebook, timeout=args.timeout, record_timing=False, resources={"metadata": {"path": folder}}).execute()
    if args.inplace:
        nbformat.write(notebook, args.notebook)
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        print(f">>> {cell.source}")
        for output in cell.get("outputs", []):
            text = output.get("text") or output.get("data", {}).get("text/plain", "")
            if text:
                print(text.rstrip("\n"))
    return EXIT_OK


COMMANDS = {"validate": _validate, "to-prompt": _to_prompt, "list": _list, "run-notebook": _run_notebook}


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # argparse prints its usage message; 2 is the usage exit code
        return int(stop.code or 0)
    paths = getattr(args, "paths", None) or ([args.notebook] if args.command == "run-notebook" else [])
    missing = _missing(paths)
    if missing:
        for p in missing:
            print(f"skills-magic: no such file or folder: {p}", file=sys.stderr)
        return EXIT_USAGE
    return COMMANDS[args.command](args)
