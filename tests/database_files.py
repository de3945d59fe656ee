"""A project's SQLite file read as another program reads it: a fresh connection to the file, never the package's
(`from database_files import entry_count, raw_rows`)."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def raw_rows(path: Path, query: str = "SELECT * FROM audit ORDER BY id") -> list[dict]:
    """The rows `query` selects (by default every audit row, oldest first), straight from the file."""
    connection = sqlite3.connect(path)
    connection.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in connection.execute(query)]
    finally:
        connection.close()


def entry_count(path: Path, where: str = "1", args: tuple = ()) -> int:
    """How many ledger entries match `where`; 0 when nothing ever opened the file."""
    if not Path(path).exists():
        return 0
    connection = sqlite3.connect(path)
    try:
        return connection.execute(f"SELECT COUNT(*) FROM ledger_entries WHERE {where}", args).fetchone()[0]
    finally:
        connection.close()
