"""Rich outputs, one module per subject: each view takes values (never a session) and renders them as text, HTML
and a vendor JSON type (views.base says how). Nothing here imports IPython or ipywidgets, so the CLI prints the same
views; live widgets are in `skills_magic.notebook.widgets`.

    base     View, the MIME type, the shared table and text pieces
    skills   the catalog: list, show, validate, sources, diagnostics, add, lint, write
    runs     a run, its load trace, the model choice
    changes  what a run's scripts changed, and applying it
    policy   the permission policy, trust, review, audit
    ledger   the experiment ledger
    votes    verification by votes
    evals    activation evals and their chart
    conversation  `%skills history`: the turns of a conversation across cells
    tools    `%skills tool list`: the Python functions offered to the model
    runlog   `%skills runs`: the run log, and one row shown
"""

from skills_magic.notebook.views.base import MIME_PREFIX, PathShow, View, mime  # re-exported: its home before the split
from skills_magic.notebook.views.changes import (  # re-exported: its home before the split
    CHANGE_COLUMNS, CHANGES_TITLE, ApplyView, changes_html, changes_metadata, changes_text,
)
from skills_magic.notebook.views.conversation import ConversationView  # noqa: F401
from skills_magic.notebook.views.evals import (  # re-exported: its home before the split
    CHART_COLOURS, EvalView, activation_chart_svg,
)
from skills_magic.notebook.views.ledger import (  # re-exported: its home before the split
    LEDGER_COLUMNS, LedgerEntryView, LedgerStateView,
)
from skills_magic.notebook.views.policy import (  # re-exported: its home before the split
    AUDIT_COLUMNS, AuditView, PolicyView, ReviewView, TrustView,
)
from skills_magic.notebook.views.runs import (  # re-exported: its home before the split
    TRACE_COLUMNS, ModelView, RunView, TraceView, trace_rows,
)
from skills_magic.notebook.views.skills import (  # re-exported: its home before the split
    ADDED_NAMES_SHOWN, SEVERITY_MARK, AddedView, DiagnosticsView, LintView, ListingView, SkillView, SourcesView,
    VerdictsView, WrittenView, diagnostic_data, diagnostic_line,
)
from skills_magic.notebook.views.tools import ToolsView  # noqa: F401
from skills_magic.notebook.views.votes import (  # re-exported: its home before the split
    OUTCOME_COLOUR, VOTE_COLOUR, VOTE_MARK, VotesView, vote_title, votes_table_html,
)

__all__ = [
    "ADDED_NAMES_SHOWN", "AUDIT_COLUMNS", "CHANGES_TITLE", "CHANGE_COLUMNS", "CHART_COLOURS", "LEDGER_COLUMNS", "MIME_PREFIX",
    "OUTCOME_COLOUR", "SEVERITY_MARK", "TRACE_COLUMNS", "VOTE_COLOUR", "VOTE_MARK", "AddedView", "ApplyView", "AuditView",
    "DiagnosticsView", "EvalView", "LedgerEntryView", "LedgerStateView", "LintView", "ListingView", "ModelView", "PathShow",
    "PolicyView", "ReviewView", "RunView", "ConversationView", "ToolsView", "SkillView", "SourcesView", "TraceView", "TrustView", "VerdictsView", "View",
    "VotesView", "WrittenView", "activation_chart_svg", "changes_html", "changes_metadata", "changes_text", "diagnostic_data",
    "diagnostic_line", "mime", "trace_rows", "vote_title", "votes_table_html",
]
