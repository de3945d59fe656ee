#!/usr/bin/env python3
"""Profile a CSV file: shape, inferred column types, missing values, examples. Prints JSON on stdout."""

import argparse
import csv
import datetime
import json
import sys

MISSING = {"", "na", "n/a", "null", "-"}
EXAMPLES = 3


def cell_type(value: str) -> str:
    for kind, parse in (("integer", int), ("number", float), ("date", datetime.date.fromisoformat)):
        try:
            parse(value)
            return kind
        except ValueError:
            continue
    return "text"


def column_type(kinds: set) -> str:
    if not kinds:
        return "text"
    if kinds <= {"integer"}:
        return "integer"
    if kinds <= {"integer", "number"}:
        return "number"
    if kinds == {"date"}:
        return "date"
    return "text"


def profile(rows: list, header: list) -> dict:
    columns = []
    for index, name in enumerate(header):
        values = [row[index] if index < len(row) else "" for row in rows]
        present = [v for v in values if v.strip().lower() not in MISSING]
        columns.append({
            "name": name,
            "type": column_type({cell_type(v.strip()) for v in present}),
            "missing": len(values) - len(present),
            "distinct": len(set(present)),
            "examples": list(dict.fromkeys(present))[:EXAMPLES],
        })
    return {"rows": len(rows), "columns": len(header), "profile": columns}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path", help="the CSV file, or - for standard input")
    parser.add_argument("--delimiter", default=",")
    args = parser.parse_args()
    handle = sys.stdin if args.path == "-" else open(args.path, newline="", encoding="utf-8")
    with handle:
        reader = csv.reader(handle, delimiter=args.delimiter)
        header = next(reader, [])
        rows = list(reader)
    json.dump(profile(rows, header), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
