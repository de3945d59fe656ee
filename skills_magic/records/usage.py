"""How much each skill is used, measured from the run log (records/runlog.py): per skill name, of every source, its
activations (a load trace's `activate` row, or a `fork` row for a skill that ran in a child loop), its resource
reads (`reference` rows, `skill/path`), the runs that did either and when the last of them was.

One SQL query over the `trace` column (SQLite's `json_each`), grouped by name: no row's bodies are read and no row
is parsed in Python, so 100,000 runs cost one scan of the table.
"""

from __future__ import annotations

from dataclasses import dataclass

ACTIVATING_STAGES = ("activate", "fork")  # a fork runs the skill in a child loop: a use like an activation
DENIED_PREFIX = "denied"  # a read the harness refused (its `detail` says so) read nothing

USAGE_QUERY = f"""
WITH events AS (
    SELECT runs.id AS run, runs.at AS at, json_extract(event.value, '$.stage') AS stage,
           json_extract(event.value, '$.object') AS object
    FROM runs, json_each(runs.trace) AS event
    WHERE runs.kind = 'run' AND runs.trace IS NOT NULL
      AND json_extract(event.value, '$.stage') IN ('reference', {", ".join(f"'{s}'" for s in ACTIVATING_STAGES)})
      AND coalesce(json_extract(event.value, '$.detail'), '') NOT LIKE '{DENIED_PREFIX}%'
), named AS (
    SELECT run, at, stage,
           CASE WHEN stage = 'reference' THEN substr(object, 1, instr(object, '/') - 1) ELSE object END AS name
    FROM events
)
SELECT name, sum(stage != 'reference'), sum(stage = 'reference'), count(DISTINCT run), max(at)
FROM named WHERE name IS NOT NULL AND name != '' GROUP BY name
"""


@dataclass(frozen=True)
class Usage:
    """One skill's use in the run log: activations, resource reads, the runs with either, the last one's time."""

    activations: int = 0
    reads: int = 0
    runs: int = 0
    last_used: str | None = None  # the run log's `at` (UTC, ISO 8601); None: never used

    @property
    def uses(self) -> int:
        return self.activations + self.reads


NEVER_USED = Usage()


def skill_usage(run_log) -> dict[str, Usage]:
    """Every skill name the run log's runs activated or read from (any session, any source), with its Usage."""
    connection = run_log.database.connect()
    return {name: Usage(int(activations), int(reads), int(runs), last)
            for name, activations, reads, runs, last in connection.execute(USAGE_QUERY).fetchall()}


def least_used_first(names: list[str], usage: dict[str, Usage]) -> list[str]:
    """`names` ordered from the least used (fewest uses, then the longest unused) to the most used; ties keep the
    listing's order from its end, so that equal use drops as the default listing would."""
    ranked = list(reversed(names))
    return sorted(ranked, key=lambda n: (usage.get(n, NEVER_USED).uses, usage.get(n, NEVER_USED).last_used or ""))
