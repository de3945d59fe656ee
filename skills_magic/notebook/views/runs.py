"""The views of a run: `%%skill run`'s answer with its tool calls, usage and load trace (a RunResult is displayed as
its RunView: `run_bundle`, `ShownRun`), `%skills trace`, and the model choice (`%skills model`, `%ledger model`)."""

from __future__ import annotations

from typing import Any

from skills_magic.notebook.views.base import View, escape, plural, preformatted, table_html, table_text
from skills_magic.notebook.views.changes import CHANGES_TITLE, changes_html, changes_metadata, changes_text
from skills_magic.notebook.views.ledger import LEDGER_COLUMNS, ledger_row
from skills_magic.runs.result import RunResult


def _thousands(n: int | None) -> str:
    return "" if n is None else f"{n:,}"


TRACE_COLUMNS = ("stage", "object", "bytes", "in tok", "out tok", "cache read", "cache write", "detail")
TRACE_NUMBERS = frozenset({2, 3, 4, 5, 6})  # the columns of counts: right-aligned, as in the text table
OUTPUTS_TITLE = "files the scripts wrote (in their scratch folders)"
OUTPUT_COLUMNS = ("script", "path", "bytes")
FORK_TITLE = "fork {name}: its own run, in a fresh context"
FORK_INDENT = "    "  # a nested run's text, one level in: deep enough to read as inside the trace above it
FORK_STYLE = "margin-left:1.5em;border-left:2px solid #ccc;padding-left:0.5em"


def trace_rows(trace) -> list[tuple[str, ...]]:
    return [
        (e.stage, e.object, _thousands(e.bytes), _thousands(e.input_tokens), _thousands(e.output_tokens),
         _thousands(e.cache_read_tokens), _thousands(e.cache_write_tokens), e.detail)
        for e in trace
    ]


class TraceView(View):
    """The load trace of a run: what was disclosed to the model, in UTF-8 bytes and reported tokens."""

    kind = "trace"

    def __init__(self, result):
        self.result = result

    def text(self) -> str:
        return "\n\n".join([table_text(TRACE_COLUMNS, trace_rows(self.result.trace)), *map(fork_text, self.result.forks)])

    def html(self) -> str:
        return (table_html(TRACE_COLUMNS, trace_rows(self.result.trace), names=(0, 1), numeric=TRACE_NUMBERS)
                + "".join(map(fork_html, self.result.forks)))

    def data(self) -> dict[str, Any]:
        return {"trace": [e.to_dict() for e in self.result.trace],
                **({"forks": [TraceView(f).data() | {"skill": f.skill} for f in self.result.forks]} if self.result.forks else {})}


class RunView(View):
    """`%%skill run`: the answer (Markdown), the tool calls, why it stopped, the usage and the load trace."""

    kind = "run"

    def __init__(self, result, seconds: float | None = None):
        self.result, self.seconds = result, seconds

    def _calls(self) -> list[str]:
        from skills_magic.runs.tools import describe_input

        lines = []
        for call in self.result.tool_calls:
            outcome = f"error: {call.error}" if call.is_error else plural(call.result_bytes, "byte")
            lines.append(f"{call.name} {describe_input(call.input)} -> {outcome}")
        return lines

    def _status(self) -> str:
        r = self.result
        status = f"stop: {r.stop_reason}"
        if r.client != "none":
            status += f" after {plural(r.turns, 'model call')} ({r.client}, {r.model})"
        if r.note:
            status += f"; {r.note}"
        if r.error:
            status += f"\nerror: {r.error}"
        return status

    def _usage(self) -> str:
        u = self.result.usage
        priced = self.result.priced_usd
        cost = "" if priced is None else f" · cost ${priced:.6f} (at the price table)"
        cost += "" if self.result.cost_usd is None else f" · cost ${self.result.cost_usd:.6f} (as the harness reported it)"
        return (f"usage: input {u['input_tokens']:,} · output {u['output_tokens']:,} · cache read "
                f"{u['cache_read_input_tokens']:,} · cache write {u['cache_creation_input_tokens']:,} tokens{cost}")

    def text(self) -> str:
        parts = [self.result.final_text.rstrip() or "(no answer)"]
        if self.result.tool_calls:
            parts.append("tool calls:\n" + "\n".join(f"  {line}" for line in self._calls()))
        if self.result.outputs:
            parts.append(f"{OUTPUTS_TITLE}:\n"
                         + "\n".join(f"  {o['script']}: {o['path']} ({plural(o['bytes'], 'byte')})" for o in self.result.outputs))
        if self.result.changes:
            parts.append(changes_text(self.result.changes, f"{CHANGES_TITLE}:"))
        if self.result.ledger_entries:
            parts.append("ledger entries written by the model:\n" + "\n".join(f"  {e.plan} {e.summary()}" for e in self.result.ledger_entries))
        parts.append(self._status())
        if self.result.client != "none":
            parts.append(self._usage())
        parts.append("load trace:\n" + TraceView(self.result).text())
        return "\n\n".join(parts)

    def _answer_html(self) -> str:
        """The model's answer as Markdown (its own markup, raw HTML shown as text); a script's output (a run without a
        model) as the literal text it is: `__init__`, `2*3*4`, `# x` and indented JSON stay as printed."""
        if self.result.client == "none":
            return preformatted(self.result.final_text.rstrip("\n") or "(no output)", "skills-magic-stdout")
        from markdown_it import MarkdownIt

        return MarkdownIt("commonmark", {"html": False}).render(self.result.final_text or "*(no answer)*")

    def _outputs_html(self) -> str:
        rows = [(o["script"], o["path"], f"{o['bytes']:,}") for o in self.result.outputs]
        return (f"<details open><summary>{escape(OUTPUTS_TITLE)} ({len(rows)})</summary>"
                + table_html(OUTPUT_COLUMNS, rows, names=(0, 1), numeric=(2,)) + "</details>")

    def html(self) -> str:
        calls = "".join(f"<li><code>{escape(line)}</code></li>" for line in self._calls())
        status = self._status() + (f"\n{self._usage()}" if self.result.client != "none" else "")
        return (
            f"<div class='skills-magic-run'>{self._answer_html()}"
            + (f"<details><summary>tool calls ({len(self.result.tool_calls)})</summary><ul>{calls}</ul></details>" if calls else "")
            + (self._outputs_html() if self.result.outputs else "")
            + (changes_html(self.result.changes, CHANGES_TITLE) if self.result.changes else "")
            + (f"<details open><summary>ledger entries ({len(self.result.ledger_entries)})</summary>"
               + table_html(LEDGER_COLUMNS, [ledger_row(e) for e in self.result.ledger_entries]) + "</details>"
               if self.result.ledger_entries else "")
            + preformatted(status, "skills-magic-status")
            + f"<details open><summary>load trace</summary>{TraceView(self.result).html()}</details></div>"
        )

    def data(self) -> dict[str, Any]:
        r = self.result
        return {
            "skill": r.skill,
            "client": r.client,
            "model": r.model,
            "final_text": r.final_text,
            "stop_reason": r.stop_reason,
            "note": r.note,
            "error": r.error,
            "interrupted": r.interrupted,
            "turns": r.turns,
            "tool_calls": [{"name": c.name, "input": c.input, "result_bytes": c.result_bytes, "is_error": c.is_error,
                            "error": c.error} for c in r.tool_calls],
            "usage": dict(r.usage),
            "trace": [e.to_dict() for e in r.trace],
            "ledger_entries": [e.to_dict() for e in r.ledger_entries],
            "outputs": [{k: o[k] for k in ("script", "path", "bytes")} for o in r.outputs],
            # only where a run changed something, so the outputs of runs that change nothing stay as they were
            **({"changes": [c.to_dict() for c in r.changes]} if r.changes else {}),
            **({"forks": [RunView(f).data() for f in r.forks]} if r.forks else {}),  # the nested runs, likewise
            **({"cost_usd": r.cost_usd} if r.cost_usd is not None else {}),  # what Claude Code reported, likewise
            **({"priced_usd": round(r.priced_usd, 8)} if r.priced_usd is not None else {}),  # at the price table
        }

    def metadata(self) -> dict[str, Any]:
        meta: dict[str, Any] = {} if self.seconds is None else {"seconds": round(self.seconds, 6)}
        if self.result.outputs:  # where the files are on this machine: volatile, so not in the data
            meta["output_files"] = [o["file"] for o in self.result.outputs]
        if self.result.changes:  # run ids differ on every run: the command to apply them is metadata
            meta.update(changes_metadata(self.result.changes))
        return meta


def fork_text(child) -> str:
    """A `context: fork` run nested in its parent's trace: its tool calls, stop, usage and trace (its own forks in
    it), indented under its title."""
    view = RunView(child)
    parts = [*(["tool calls:", *(f"  {line}" for line in view._calls())] if child.tool_calls else []),
             view._status(), view._usage(), "load trace:", TraceView(child).text()]
    body = "\n".join(parts)
    return FORK_TITLE.format(name=child.skill) + ":\n" + "\n".join(FORK_INDENT + line if line else line for line in body.splitlines())


def fork_html(child) -> str:
    view = RunView(child)
    calls = "".join(f"<li><code>{escape(line)}</code></li>" for line in view._calls())
    return (f"<details open class='skills-magic-fork'><summary>{escape(FORK_TITLE.format(name=child.skill))}</summary>"
            f"<div style='{FORK_STYLE}'>" + (f"<ul>{calls}</ul>" if calls else "")
            + preformatted(f"{view._status()}\n{view._usage()}", "skills-magic-status")
            + TraceView(child).html() + "</div></details>")


def run_bundle(result) -> tuple[dict[str, Any], dict[str, Any]]:
    """The display of a RunResult, exactly its RunView's (the formatter `%load_ext` registers for RunResult)."""
    return RunView(result, result.seconds)._repr_mimebundle_()


class ShownRun(RunResult, RunView):
    """A RunResult as `%%skill run` returns it: the very object (`_ is session.last_run`, every attribute of
    RunResult), which also answers what code written when a cell returned a RunView calls on it (`.result`,
    `.data()`, `.text()`, `_repr_mimebundle_()`)."""

    @property
    def result(self) -> ShownRun:
        return self

    @classmethod
    def of(cls, result: RunResult) -> ShownRun:
        """The result itself, now shown as its view (its class changes in place, so every holder sees the same object)."""
        if not isinstance(result, cls):
            result.__class__ = cls
        return result


class ModelView(View):
    kind = "model"

    def __init__(self, client_name: str, model_id: str, detail: str = ""):
        self.client_name, self.model_id, self.detail = client_name, model_id, detail

    def text(self) -> str:
        return f"model: {self.client_name} ({self.model_id})" + (f"; {self.detail}" if self.detail else "")

    def data(self) -> dict[str, Any]:
        return {"client": self.client_name, "model": self.model_id, "detail": self.detail}
