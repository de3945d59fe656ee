"""Live outputs built on ipywidgets (imported only here): a background run with Allow/Deny permission prompts, the
live vote board of a verification, the stage board of a research run, and the progress bar of an eval.

A cell that is still executing cannot receive a button click (the kernel handles one message at a time, and
jupyter-ui-poll does not work on ipykernel 7), so a run that may ask runs in a worker thread: the cell returns at
once, the widget shows progress, a prompt appears when a script needs a decision, and a `threading.Event` waits for
the click, with a timeout that denies.
"""

from __future__ import annotations

import html
import threading
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

from skills_magic.notebook.views.base import plural
from skills_magic.safety.requests import Answer, PermissionRequest

PROMPT_TIMEOUT_SECONDS = 300.0  # an unanswered prompt denies after five minutes; the run goes on without the script


class PermissionPrompt:
    """Allow once / Always / Deny buttons for one request; `wait()` returns the answer (deny on timeout)."""

    def __init__(self, request: PermissionRequest, timeout: float = PROMPT_TIMEOUT_SECONDS):
        self.request = request
        self.timeout = timeout
        self.answer: Answer = "deny"
        self.answered = threading.Event()
        self.buttons = {
            "once": widgets.Button(description="Allow once", button_style="success"),
            "always": widgets.Button(description="Always for this skill and path", button_style="warning",
                                     layout=widgets.Layout(width="auto")),
            "deny": widgets.Button(description="Deny", button_style="danger"),
        }
        for answer, button in self.buttons.items():
            button.on_click(lambda _button, a=answer: self._choose(a))
        text = html.escape(request.describe())
        self.widget = widgets.VBox([
            widgets.HTML(f"<pre class='skills-magic-permission'>{text}</pre>"),
            widgets.HBox(list(self.buttons.values())),
        ])

    def _choose(self, answer: Answer) -> None:
        self.answer = answer
        self.answered.set()

    def wait(self) -> tuple[Answer, bool]:
        """The answer, and whether it came from a person (False: the timeout denied)."""
        clicked = self.answered.wait(self.timeout)
        for button in self.buttons.values():
            button.disabled = True
        return (self.answer if clicked else "deny"), clicked


class BackgroundRun:
    """`%%skill run --background`: the loop in a worker thread, shown and asked through one widget."""

    def __init__(self, session, task: str, name: str | None, arguments: str, options: dict[str, Any],
                 timeout: float = PROMPT_TIMEOUT_SECONDS):
        self.session, self.task, self.name, self.arguments, self.options = session, task, name, arguments, options
        self.timeout = timeout
        self.status = widgets.HTML("<i>running in the background…</i>")
        self.box = widgets.VBox([self.status])
        self.result = None
        self.error: str | None = None
        self.thread = threading.Thread(target=self._work, name="skills-magic-background-run", daemon=True)
        self.prompts: list[PermissionPrompt] = []

    def start(self) -> BackgroundRun:
        self.thread.start()
        return self

    def ask(self, request: PermissionRequest) -> Answer:
        prompt = PermissionPrompt(request, self.timeout)
        self.prompts.append(prompt)
        self.box.children = (*self.box.children, prompt.widget)
        answer, clicked = prompt.wait()
        verdict = {"once": "allowed once", "always": "allowed always", "deny": "denied"}[answer]
        note = verdict if clicked else f"denied: no answer within {self.timeout:.0f} s"
        prompt.widget.children = (*prompt.widget.children, widgets.HTML(f"<b>{html.escape(note)}</b>"))
        return answer

    def _work(self) -> None:
        from skills_magic.notebook.views.runs import RunView

        try:
            self.result = self.session.run(self.task, self.name, self.arguments, asker=self.ask, **self.options)
            view = RunView(self.result, self.session.last_run_seconds)
            self.status.value = view.html()
        except Exception as error:  # shown in the widget: a background thread has no cell to raise into
            self.error = str(error)
            self.status.value = f"<pre>{html.escape(type(error).__name__ + ': ' + str(error))}</pre>"

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return self.box._repr_mimebundle_(include=include, exclude=exclude)


class VoteBoard:
    """A live board: a row per claim, a cell per voter, redrawn as each vote arrives (from the worker thread)."""

    def __init__(self, claims, votes_per_claim: int):
        from skills_magic.runs.verify import ClaimResult, Vote

        self.claims = [ClaimResult(i, c, [Vote(i, seat + 1, "pending") for seat in range(votes_per_claim)])
                       for i, c in enumerate(claims)]
        self.votes_per_claim = votes_per_claim
        self.html = widgets.HTML(self._render("verifying…"))
        self._lock = threading.Lock()

    def _render(self, summary: str) -> str:
        from skills_magic.notebook.views.votes import votes_table_html

        return votes_table_html(self.claims, self.votes_per_claim, summary)

    def update(self, claim, vote) -> None:
        """`on_vote` of a verification: swap in the live objects, redraw."""
        with self._lock:
            if claim.index < len(self.claims):
                self.claims[claim.index] = claim
            done = sum(v.status != "pending" for c in self.claims for v in c.votes)
            total = sum(len(c.votes) for c in self.claims)
            self.html.value = self._render(f"{done} of {plural(total, 'vote')} in")

    def finish(self, summary: str, claims=None) -> None:
        """The final state: the result's claims (a cancelled run's unheard votes included) and its summary."""
        with self._lock:
            if claims is not None:
                self.claims = list(claims)
            self.html.value = self._render(summary)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return self.html._repr_mimebundle_(include=include, exclude=exclude)


class StageBoard:
    """A live board of an orchestration's stages (a research run's): each stage's items started, done and abstained,
    redrawn as they change, from the worker thread that runs the calls."""

    def __init__(self):
        from skills_magic.runs.orchestrate import Board

        self.board = Board()
        self.html = widgets.HTML(self._render("starting…"))
        self._lock = threading.Lock()

    def _render(self, summary: str) -> str:
        from skills_magic.notebook.views.research import board_html

        return board_html(self.board.stages, summary)

    def hear(self, kind: str, data) -> None:
        """`on_event` of an orchestration."""
        with self._lock:
            self.board.hear(kind, data)
            self.html.value = self._render(f"{plural(self.board.running, 'agent')} running")

    def finish(self, board, summary: str) -> None:
        with self._lock:
            self.board = board
            self.html.value = self._render(summary)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return self.html._repr_mimebundle_(include=include, exclude=exclude)


def eval_progress(description: str = "eval") -> Callable[[int, int], None]:
    """The `on_progress(done, total)` of an eval (runs done of all): its first call shows the bar, so a prompt set
    refused before the runs begin (a wrong file, an unknown skill) shows its error alone, without a bar."""
    from IPython.display import display as show

    bar = widgets.IntProgress(value=0, min=0, max=1, description=description)
    shown: list[bool] = []

    def progress(done: int, total: int) -> None:
        bar.max, bar.value = max(total, 1), done
        bar.description = f"{done}/{total}"
        if not shown:
            shown.append(True)
            show(bar)

    return progress
