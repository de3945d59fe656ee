#!/usr/bin/env python3
"""Check a candidate travel-policy answer against the exact text of its cited source, for the question date.

Reads one JSON request on stdin, writes one JSON report on stdout (the shape of assets/report-template.json).
Standard library only, no network. Exit code 0: a report (supported or not); 2: the request itself is malformed
(the report then carries an `error`). See references/evidence-contract.md for the rules.
"""

from __future__ import annotations

import datetime
import json
import re
import sys
from pathlib import Path

CONTRACT = "source-verification/1.0.0"
AUTHORITY_ALLOWLIST = ("Travel Policy Office",)  # issuers whose policies count; anything else is reported, not used
UNIT = "per room per night"  # the unit a complete lodging span must state
SOURCES = Path(__file__).resolve().parent.parent / "assets" / "sources"
REQUIRED = ("question_date", "topic", "language", "candidate", "citation")
KNOWN = set(REQUIRED)  # every other input field is outside the contract: listed as ignored, never used


class RequestError(Exception):
    """The request cannot be checked: a malformed field, not a failed check."""


def _date(value, field):
    try:
        return datetime.date.fromisoformat(str(value))
    except ValueError:
        raise RequestError(f"{field} must be a date YYYY-MM-DD, not {value!r}") from None


def _lines(value):
    match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", str(value))
    if not match:
        raise RequestError(f"citation.lines must be a line or a range such as 1-3, not {value!r}")
    first, last = int(match.group(1)), int(match.group(2) or match.group(1))
    if first < 1 or last < first:
        raise RequestError(f"citation.lines {value!r} is not a range of lines counted from 1")
    return first, last


def _amount(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(f"candidate.amount must be a number, not {value!r}")
    return value


def read_request(text):
    try:
        request = json.loads(text)
    except json.JSONDecodeError as error:
        raise RequestError(f"stdin is not JSON: {error.msg} at line {error.lineno} column {error.colno}") from None
    if not isinstance(request, dict):
        raise RequestError("the request must be a JSON object")
    missing = [f for f in REQUIRED if f not in request]
    if missing:
        raise RequestError(f"missing fields: {', '.join(missing)}")
    candidate, citation = request["candidate"], request["citation"]
    if not isinstance(candidate, dict) or "amount" not in candidate:
        raise RequestError("candidate must be an object with an amount")
    if not isinstance(citation, dict) or not all(k in citation for k in ("source_id", "lines", "quote")):
        raise RequestError("citation must be an object with source_id, lines and quote")
    if not isinstance(citation["quote"], str):
        raise RequestError("citation.quote must be the quoted text")
    return request


def check(request):
    question_date = _date(request["question_date"], "question_date")
    amount = _amount(request["candidate"]["amount"])
    citation = request["citation"]
    first, last = _lines(citation["lines"])
    index = json.loads((SOURCES / "index.json").read_text(encoding="utf-8"))
    source_id = str(citation["source_id"])
    report = {
        "contract": CONTRACT,
        "question_date": question_date.isoformat(),
        "source_id": source_id,
        "lines": f"{first}-{last}",
        "checks": {},
        "supported": False,
        "reason": "",
        "ignored_fields": sorted(k for k in request if k not in KNOWN),
    }
    checks = report["checks"]
    source = index.get(source_id)
    if source is None:
        checks.update(quote_matches=False, date_eligible=None, authority_ok=False, span_complete=False,
                      claim_supported=False, context_matches=False)
        report["reason"] = f"{source_id} is not a source of the local corpus"
        return report
    stored = (SOURCES / source["file"]).read_text(encoding="utf-8").splitlines()
    span = "\n".join(stored[first - 1:last]) if last <= len(stored) else None
    quote = citation["quote"]
    checks["quote_matches"] = span is not None and quote.strip() == span.strip()
    if checks["quote_matches"]:
        valid_from = _date(source["valid_from"], "valid_from")
        valid_until = _date(source["valid_until"], "valid_until") if source.get("valid_until") else None
        checks["date_eligible"] = valid_from <= question_date and (valid_until is None or question_date < valid_until)
    else:
        checks["date_eligible"] = None  # metadata alone cannot establish what an unverified text says
    checks["authority_ok"] = source.get("issuer") in AUTHORITY_ALLOWLIST
    text = span if checks["quote_matches"] else ""
    number = f"{amount:g}"
    checks["claim_supported"] = bool(re.search(rf"(?<![\d.]){re.escape(number)} yuan\b", text))
    checks["span_complete"] = UNIT in text and str(source["valid_from"]) in text
    checks["context_matches"] = (request["topic"], request["language"]) == (source.get("topic"), source.get("language"))
    order = ("quote_matches", "date_eligible", "authority_ok", "claim_supported", "span_complete", "context_matches")
    reasons = {
        "quote_matches": f"the quotation is not the stored text of {source_id} lines {first}-{last}",
        "date_eligible": (f"{source_id} is not in force on {question_date} (valid from {source['valid_from']}"
                          + (f" until {source['valid_until']}, excluded)" if source.get("valid_until") else ")")),
        "authority_ok": f"{source.get('issuer')} is not on the authority allowlist",
        "claim_supported": f"the cited text does not state {number} yuan",
        "span_complete": f"the cited span omits the unit ({UNIT}) or the date scope",
        "context_matches": "the source's topic or language does not match the question",
    }
    failed = [name for name in order if checks[name] is not True]
    report["supported"] = not failed
    report["reason"] = reasons[failed[0]] if failed else "supported under this contract"
    return report


def main():
    try:
        report = check(read_request(sys.stdin.read()))
    except RequestError as error:
        json.dump({"contract": CONTRACT, "error": str(error), "supported": False}, sys.stdout)
        print()
        return 2
    json.dump(report, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
