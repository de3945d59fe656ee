"""The one clock of the package: UTC timestamps as ISO 8601 text, the form every audit row and record file uses."""

from __future__ import annotations

import datetime

PRECISE = "%Y-%m-%dT%H:%M:%S.%fZ"  # audit and ledger rows: microseconds keep rows written in one second in order
WHOLE_SECONDS = "%Y-%m-%dT%H:%M:%SZ"  # files a person reads (trust store, skills.lock): seconds are enough


def utc_now(whole_seconds: bool = False) -> str:
    """Now in UTC, e.g. 2026-12-01T09:30:00.123456Z (or 2026-12-01T09:30:00Z with whole_seconds)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime(WHOLE_SECONDS if whole_seconds else PRECISE)
