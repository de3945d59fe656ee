"""`%skills`: the catalog (list, show, validate, add, sources, diagnostics, lint), the model and its runs (model, trace,
history, reset, tool, eval) and permissions (allow, deny, policy, trust, review, audit, apply). Each subcommand is a method with IPython
`@argument`s: it calls the session and returns a view. `%skills?` prints the usage generated from those arguments."""

from __future__ import annotations

import argparse
import os
import time

from IPython.core.error import UsageError
from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument

from skills_magic.models.base import capabilities
from skills_magic.notebook.magics.costs import MAX_COST, CostCommands, show_estimate
from skills_magic.notebook.magics.improve import ImproveCommands
from skills_magic.notebook.magics.learned import LearnedCommands
from skills_magic.notebook.magics.runlog import RunLogCommands
from skills_magic.notebook.magics.base import SessionMagics
from skills_magic.notebook.magics.commands import command_parser, help_text, positive, subcommand, subcommands, user_errors, words
from skills_magic.notebook.views.base import JSONResult
from skills_magic.notebook.views.changes import ApplyView
from skills_magic.notebook.views.conversation import ConversationView
from skills_magic.notebook.views.evals import EvalView
from skills_magic.notebook.views.policy import AuditView, PolicyView, ReviewView, TrustView
from skills_magic.notebook.views.runs import ModelView, TraceView
from skills_magic.notebook.views.skills import AddedView, DiagnosticsView, LintView, ListingView, SkillView, SourcesView, VerdictsView
from skills_magic.notebook.views.tools import ToolsView
from skills_magic.records.usage import least_used_first
from skills_magic.skills.catalog import STANDARD_LABELS
from skills_magic.skills.skill import CODES

SHORT_USAGE = "usage: %skills list|show|validate|add|sources|diagnostics|model|trace ... (`%skills?` for details)"
SOURCE_LABELS = ("session", *STANDARD_LABELS)  # `--source`: the session's own, then the standard ones
SUMMARY = """List, show, validate and add Agent Skills; choose the model; decide which scripts may run.
Run a task or a script, verify claims or write a skill with the cell magic `%%skill` (`%%skill?`); the experiment
ledger is `%ledger` (`%ledger?`)."""
# subcommands of the cell magic `%%skill`, typed after `%skills`: a one-line pointer instead of "invalid choice"
CELL_COMMANDS = {"run": "%%skill run [NAME]` with the task as the cell body",
                 "verify": "%%skill verify` with a YAML list of claims as the cell body",
                 "write": "%%skill write NAME` with the SKILL.md as the cell body"}


def _budget(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"a budget is a number of characters (0: no budget), not {value}")
    return value


# the arguments `allow` and `deny` share (an `@argument` may decorate any number of methods)
RULE = argument("rule", nargs="+", help="SKILL:PATH-PATTERN, e.g. source-verification:scripts/* (spaces allowed)")
SAVE = argument("--save", action="store_true", help="also keep it in your config folder's skills-policy.yaml")


@magics_class
class SkillsCommandMagics(SessionMagics, RunLogCommands, CostCommands, ImproveCommands, LearnedCommands):
    """`%skills`: list, show, validate and add Agent Skills."""

    # --- the catalog --------------------------------------------------------------------------------------------

    @subcommand("list")
    @argument("--source", choices=SOURCE_LABELS, help="only skills from this source")
    @argument("--budget", type=_budget, metavar="N", help="character budget (default 8000); 0 shows everything")
    @argument("--json", action="store_true", help="return the listing as JSON data")
    @argument("--usage", action="store_true", help="each skill's use from the run log: activations, resource reads, runs")
    @argument("--by-usage", action="store_true", help="over budget, drop the least-used skills' descriptions first")
    def _list(self, args):
        """The catalog, grouped by source, under a character budget."""
        started = time.perf_counter()
        usage = self.session.skill_usage() if args.usage or args.by_usage else None
        order = least_used_first([s.name for s in self.session.scan().skills], usage) if args.by_usage else ()
        scan, listing, text = self.session.listing(budget=args.budget, source=args.source, drop_first=order)
        view = ListingView(scan, listing, text, self.session.show_path, time.perf_counter() - started, source=args.source,
                           usage=usage if args.usage else None)
        return JSONResult(view.data()) if args.json else view

    @subcommand("show")
    @argument("name", help="a skill of the catalog")
    def _show(self, args):
        """The annotation line and the body verbatim."""
        return SkillView(self.session.skill(args.name), self.session.show_path)

    @subcommand("validate")
    @argument("target", nargs="?", help="a skill's name or a path; none: every skill of the catalog")
    def _validate(self, args):
        """Strict verdicts (the specification, exactly)."""
        skipped = [os.path.dirname(r.path) for r in self.session.scan().skipped]
        return VerdictsView(self.session.validate(args.target), self.session.show_path, skipped)

    @subcommand("add")
    @argument("path", help="a skill folder, a SKILL.md or a collection of skills")
    def _add(self, args):
        """Add a skill folder or a collection, ahead of the others."""
        source, skills = self.session.add(args.path)
        return AddedView(source, skills, self.session.diagnostics(), self.session.show_path)

    @subcommand("sources")
    def _sources(self, args):
        """The sources in precedence order."""
        return SourcesView(self.session.sources(), self.session.show_path)

    @subcommand("diagnostics")
    @argument("--severity", choices=["error", "warning", "info"], help="only diagnostics of this severity")
    @argument("--code", choices=sorted(CODES), metavar="CODE", help="only diagnostics with this code")
    @argument("--json", action="store_true", help="return the diagnostics as JSON data")
    def _diagnostics(self, args):
        """What scanning the catalog found: errors, warnings and notes, each with its file and line."""
        view = DiagnosticsView(self.session.diagnostics(args.severity, args.code), self.session.show_path)
        return JSONResult(view.data()) if args.json else view

    # --- the model and its runs ---------------------------------------------------------------------------------

    @subcommand("model")
    @argument("choice", nargs="?", help="auto | anthropic [ID] | claude-code [ID] | scripted FILE | keywords [N] | replay CASSETTE | a model id")
    @argument("value", nargs="?", help="the ID, FILE, N or CASSETTE of the choice")
    def _model(self, args):
        """The model runs use: the choice, or (no choice) the one in use."""
        if args.choice is not None:
            self.session.choose_model(args.choice, args.value)
        client = self.session.model_client
        if client is None:
            chosen = "anthropic (ANTHROPIC_API_KEY is set)" if os.environ.get("ANTHROPIC_API_KEY") else "none yet (no ANTHROPIC_API_KEY)"
            return ModelView("auto", self.session.resolve_model_id(), f"runs use {chosen}")
        source = capabilities(client).source
        shown = source if source == "keyword router" else (self.session.show_path(source) if source else "")
        return ModelView(client.name, self.session.resolve_model_id(client, None, None), shown)

    @subcommand("trace")
    def _trace(self, args):
        """The load trace of the last run: what was disclosed to the model, in bytes and tokens."""
        if self.session.last_run is None:
            raise UsageError("no run yet: `%%skill run` first")
        return TraceView(self.session.last_run)

    @subcommand("history")
    @argument("name", nargs="?", help="a learned skill: its versions (none: the conversation's turns)")
    def _history(self, args):
        """The turns of the conversation `%%skill run --continue` goes on with; with NAME, a learned skill's versions."""
        if args.name:
            return self._skill_history(args.name)
        return ConversationView(self.session.conversation.history())

    @subcommand("reset")
    def _reset(self, args):
        """Forget the conversation: the next run starts a new one."""
        return ConversationView([], forgotten=self.session.conversation.reset())

    @subcommand("tool")
    @argument("action", choices=["add", "list", "remove"], help="add the notebook's functions, list them, or remove them")
    @argument("names", nargs="*", metavar="NAME", help="a function of the notebook (add) or a tool's name (remove)")
    def _tool(self, args):
        """Offer Python functions of the notebook to the model as tools (their schema from signature and docstring);
        a call runs in the kernel after its arguments are validated, and is audited."""
        if (args.action == "list") == bool(args.names):
            wanted = "takes no NAME" if args.action == "list" else "needs at least one NAME"
            raise UsageError(f"`%skills tool {args.action}` {wanted}; {SHORT_USAGE}")
        if args.action == "add":
            functions = {name: self._notebook_function(name) for name in args.names}  # all found before any is added
            replaced = [name for name in functions if name in self.session.tools]
            for name, function in functions.items():
                self.session.tools.add(function, name)
            note = f"offered {', '.join(functions)}" + (f" (replacing the earlier {', '.join(replaced)})" if replaced else "")
        elif args.action == "remove":
            for name in args.names:
                self.session.tools.remove(name)
            note = f"removed {', '.join(args.names)}"
        return ToolsView(self.session.tools.list(), note if args.names else "")

    def _notebook_function(self, name: str):
        """The notebook's object NAME (`self.shell.user_ns`); the registry judges whether it can be a tool."""
        if name not in self.shell.user_ns:
            raise UsageError(f"no {name!r} in the notebook: define it first (`def {name}(...):`), then `%skills tool add {name}`")
        return self.shell.user_ns[name]

    @subcommand("eval")
    @argument("file", help="the prompt set (YAML)")
    @argument("--runs", type=positive, metavar="N", help="runs of each prompt")
    @argument("--model", metavar="M", help="the model id the runs ask for")
    @argument("--strategy", choices=["plain", "forced"], default="plain", help="how the catalog is offered")
    @argument("--compare", metavar="WHAT", help="plain | forced | FOLDER | harness | learned:NAME@V | without:NAME: a second report beside the first")
    @argument("--harness", choices=["native", "claude-code"], help="whose agent loop runs the prompts")
    @argument("--behaviour", "--behavior", action="store_true", help="also judge each skill's expected behaviours")
    @argument("--batch", action="store_true", help="send the runs as Message Batches")
    @argument("--resume", metavar="BATCH_IDS", help="the batch ids to resume after a kernel restart, comma-separated (with --batch)")
    @argument("--chart", metavar="FILE.svg", help="also save the bar chart as this SVG file")
    @MAX_COST
    @argument("--save", metavar="NAME", help="keep this result in the run log as NAME (a baseline for --against)")
    @argument("--against", metavar="NAME", help="compare this run with the result saved as NAME")
    def _eval(self, args):
        """Activation evals of a prompt set: activation per category, false and wrong activations, per skill."""
        progress = None
        if self._has_front_end():
            from skills_magic.notebook.widgets import eval_progress

            progress = eval_progress()
        started = time.perf_counter()
        reports = self.session.eval(args.file, runs=args.runs, model=args.model, strategy=args.strategy,
                                    compare=args.compare, behaviour=args.behaviour, batch=args.batch, resume=args.resume,
                                    on_progress=progress, harness=args.harness, save=args.save, against=args.against,
                                    max_cost=args.max_cost, on_estimate=show_estimate)  # the estimate shown first
        view = EvalView(reports, self.session.lint(), time.perf_counter() - started)
        if args.chart:
            with open(os.path.join(self.session.cwd, args.chart), "w", encoding="utf-8") as handle:
                handle.write(view.chart_svg())
        return view

    @subcommand("lint")
    @argument("name", nargs="?", help="a skill of the catalog; none: every skill")
    def _lint(self, args):
        """Description lint of one skill or every skill."""
        skipped = self.session.scan().skipped if args.name is None else ()  # one skill: a skipped one is an error
        return LintView(self.session.lint(args.name), skipped, self.session.show_path)

    # --- permissions --------------------------------------------------------------------------------------------

    @subcommand("allow")
    @RULE
    @SAVE
    @argument("--env", action="append", default=[], metavar="VAR", help="a secret-looking variable the script may see")
    @argument("--network", nargs="?", const=True, default=False, metavar="HOSTS",
              help="HOSTS (pypi.org,*.crossref.org): only those, through the proxy; alone: everything")
    @argument("--write", action="append", default=[], metavar="PATH", help="a path the script may write besides its scratch")
    @argument("--unsandboxed", action="store_true", help="run even where no sandbox can be made")
    @argument("--memory", metavar="SIZE", help="memory a process may use (default 2G), e.g. 4G")
    @argument("--processes", metavar="N", help="processes and threads together (default 256)")
    @argument("--cpu", metavar="SECONDS", help="CPU seconds a process may use (default 120)")
    @argument("--max-writes", dest="max_writes", metavar="SIZE", help="everything a run writes together (default 256M)")
    @argument("--max-file", dest="max_file", metavar="SIZE", help="the largest file a run writes (default 1G)")
    @argument("--timeout", metavar="SECONDS", help="seconds a run may take in all (default 60)")
    def _allow(self, args):
        """Let scripts matching the rule run (deny rules win); --save keeps it in your config folder's policy file."""
        limits = {name: value for name, value in (("memory", args.memory), ("processes", args.processes),
                                                  ("cpu", args.cpu), ("max-writes", args.max_writes),
                                                  ("max-file", args.max_file), ("timeout", args.timeout))
                  if value is not None}
        self.session.add_rule("allow", " ".join(args.rule), args.env, network=args.network, writable=args.write,
                              unsandboxed=args.unsandboxed, limits=limits, save=args.save)
        return self._policy(args)

    @subcommand("deny")
    @RULE
    @SAVE
    def _deny(self, args):
        """Never let scripts matching the rule run."""
        self.session.add_rule("deny", " ".join(args.rule), save=args.save)
        return self._policy(args)

    @subcommand("policy")
    def _policy(self, args):
        """The rules, where each came from, the policy files (trusted or not), the review states and the sandbox."""
        state = self.session.policy_state()
        return PolicyView(state.rules, state.problems, state.reviews, state.files, self.session.show_path, sandbox=state.sandbox)

    @subcommand("trust")
    @argument("--revoke", action="store_true", help="forget the trusted digest: the file's allow rules are inert again")
    def _trust(self, args):
        """Show every rule of the project's skills-policy.yaml and trust these exact bytes (any change: inert again)."""
        return TrustView(self.session.trust(revoke=args.revoke), self.session.show_path)

    @subcommand("review")
    @argument("name", help="a skill of the catalog")
    @argument("--yes", action="store_true", help="accept the bytes shown without a prompt")
    def _review(self, args):
        """Files, digests and changes since the last review; accept them into skills.lock."""

        def confirm() -> bool:
            if args.yes:
                return True
            try:
                return input("Write these digests to skills.lock? [y/N]: ").strip().lower() in ("y", "yes")
            except Exception:  # StdinNotImplementedError, EOFError, OSError: nobody can confirm here
                return False

        skill, changes, written = self.session.review(args.name, confirm)
        return ReviewView.of(skill, changes, written, self.session.review_state(skill))

    @subcommand("audit")
    @argument("--all", action="store_true", help="every session's records, not only this one's")
    def _audit(self, args):
        """Every permission decision and script run."""
        return AuditView(self.session.audit(everything=args.all))

    @subcommand("apply")
    @argument("run", help="a run id (run-ab12cd34) or `last`: the scripts of this session's last run")
    @argument("paths", nargs="*", help="only these changed files (or folders), relative to the working folder")
    def _apply(self, args):
        """Copy what a run's scripts wrote in the working folder (copy-on-write until now) into the project."""
        return ApplyView(self.session.apply(args.run, args.paths))

    # --- the magic ----------------------------------------------------------------------------------------------

    @line_magic
    def skills(self, line: str):
        argv = words(line, SHORT_USAGE)
        if not argv:
            raise UsageError(SHORT_USAGE)
        if argv[0] in CELL_COMMANDS:
            raise UsageError(f"`{argv[0]}` belongs to the cell magic: use `{CELL_COMMANDS[argv[0]]} (`%%skill?` for details)")
        args = PARSER.parse_args(argv)
        with user_errors():
            return args.handler(self, args)


PARSER = command_parser("skills", "command", SHORT_USAGE, subcommands(SkillsCommandMagics))
SkillsCommandMagics.skills.__doc__ = help_text(SUMMARY, list(PARSER.commands.values()))
