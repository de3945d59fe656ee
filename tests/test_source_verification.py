"""The source-verification sample skill's helper, run as a real subprocess: Table 48.1, the date boundaries, the
negative cases of section 48.5, and malformed input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from skills_magic.skills.validate import validate_folder

SKILL = Path(__file__).resolve().parent.parent / "sample-skills" / "source-verification"
SOURCES = SKILL / "assets" / "sources"


def lines_of(source: str, first: int, last: int) -> str:
    return "\n".join((SOURCES / f"{source}.txt").read_text(encoding="utf-8").splitlines()[first - 1:last])


def request(amount, source, lines, date, quote=None, **extra):
    first, _, last = lines.partition("-")
    return {
        "question_date": date, "topic": "lodging", "language": "en",
        "candidate": {"amount": amount, "unit": "yuan per room per night"},
        "citation": {"source_id": source, "lines": lines,
                     "quote": quote if quote is not None else lines_of(source, int(first), int(last or first))},
        **extra,
    }


def verify(payload) -> tuple[int, dict, str]:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    run = subprocess.run([sys.executable, str(SKILL / "scripts" / "verify.py")], input=text, capture_output=True,
                         text=True, cwd=SKILL, timeout=60)
    return run.returncode, json.loads(run.stdout), run.stderr


ALTERED_V2 = lines_of("travel-v2", 1, 3).replace("750", "900")

# Table 48.1: (case, request, exact quotation?, eligible date?, claim supported (and span complete)?, result)
TABLE_48_1 = [
    ("750, v2 lines 1-3, 2026 date", request(750, "travel-v2", "1-3", "2026-09-14"), True, True, True, "Accept"),
    ("750, v1 lines 1-3, 2026 date", request(750, "travel-v1", "1-3", "2026-09-14"), True, False, False, "Withhold"),
    ("600, v1 lines 1-3, 2025 date", request(600, "travel-v1", "1-3", "2025-09-14"), True, True, True, "Accept"),
    ("750, v2 line 3 alone", request(750, "travel-v2", "3", "2026-09-14"), True, True, "incomplete", "Withhold"),
    ("750, altered text claiming to be v2", request(750, "travel-v2", "1-3", "2026-09-14", quote=ALTERED_V2), False, None,
     False, "Withhold"),
]


@pytest.mark.parametrize("case, payload, exact, eligible, supported_claim, result", TABLE_48_1, ids=[c[0] for c in TABLE_48_1])
def test_table_48_1(case, payload, exact, eligible, supported_claim, result):
    code, report, stderr = verify(payload)
    assert code == 0 and stderr == ""
    checks = report["checks"]
    assert checks["quote_matches"] is exact
    assert checks["date_eligible"] is eligible  # None: metadata alone is insufficient
    if supported_claim == "incomplete":
        assert checks["claim_supported"] is True and checks["span_complete"] is False
        assert "unit" in report["reason"]
    else:
        assert checks["claim_supported"] is supported_claim
    assert ("Accept" if report["supported"] else "Withhold") == result


@pytest.mark.parametrize("date, source, amount, eligible", [
    ("2025-01-01", "travel-v1", 600, True), ("2025-12-31", "travel-v1", 600, True), ("2026-01-01", "travel-v1", 600, False),
    ("2025-01-01", "travel-v2", 750, False), ("2025-12-31", "travel-v2", 750, False), ("2026-01-01", "travel-v2", 750, True),
])
def test_the_date_interval_includes_valid_from_and_excludes_valid_until(date, source, amount, eligible):
    code, report, _ = verify(request(amount, source, "1-3", date))
    assert code == 0 and report["checks"]["date_eligible"] is eligible and report["supported"] is eligible


def test_a_changed_amount_is_not_supported_by_an_exact_quotation():
    _, report, _ = verify(request(800, "travel-v2", "1-3", "2026-09-14"))
    assert report["checks"]["quote_matches"] and not report["checks"]["claim_supported"] and not report["supported"]
    assert "800 yuan" in report["reason"]


def test_an_unreviewed_authority_is_reported_however_exact():
    _, report, _ = verify(request(750, "travel-blog", "1-3", "2026-09-14"))
    checks = report["checks"]
    assert checks["quote_matches"] and checks["claim_supported"] and checks["authority_ok"] is False
    assert not report["supported"] and "allowlist" in report["reason"]


def test_a_failed_candidate_is_never_replaced_by_a_passing_one():
    # the right answer exists in v2, but the candidate cited v1: the report judges what was cited, nothing else
    _, report, _ = verify(request(750, "travel-v1", "1-3", "2026-09-14"))
    assert report["source_id"] == "travel-v1" and report["lines"] == "1-3" and not report["supported"]


def test_fields_outside_the_contract_are_ignored_and_never_leak_into_a_pass():
    code, report, _ = verify(request(750, "travel-v1", "1-3", "2026-09-14", approved_to_cancel=True))
    assert code == 0 and report["supported"] is False
    assert report["ignored_fields"] == ["approved_to_cancel"] and "approved_to_cancel" not in report
    code, report, _ = verify(request(750, "travel-v2", "1-3", "2026-09-14", approved_to_cancel=True))
    assert report["supported"] is True and "approved_to_cancel" not in report


def test_an_unknown_source_and_a_line_range_past_the_end():
    _, report, _ = verify(request(750, "travel-v2", "1-3", "2026-09-14") | {"citation": {"source_id": "travel-v9", "lines": "1-3", "quote": "x"}})
    assert not report["supported"] and "not a source" in report["reason"]
    _, report, _ = verify(request(750, "travel-v2", "1-3", "2026-09-14") | {"citation": {"source_id": "travel-v2", "lines": "3-9", "quote": "x"}})
    assert report["checks"]["quote_matches"] is False and not report["supported"]


@pytest.mark.parametrize("payload, words", [
    ("{not json", "not JSON"),
    ("[1, 2]", "JSON object"),
    (json.dumps({"question_date": "2026-09-14"}), "missing fields"),
    (json.dumps(request(750, "travel-v2", "1-3", "14/09/2026")), "YYYY-MM-DD"),
    (json.dumps(request("750", "travel-v2", "1-3", "2026-09-14")), "amount must be a number"),
    (json.dumps(request(750, "travel-v2", "1-3", "2026-09-14") | {"citation": {"source_id": "travel-v2", "lines": "one-three", "quote": "x"}}), "citation.lines"),
    (json.dumps(request(750, "travel-v2", "1-3", "2026-09-14") | {"citation": {"source_id": "travel-v2"}}), "citation must"),
    ("", "not JSON"),
])
def test_malformed_input_is_a_json_error_report_with_exit_code_2(payload, words):
    code, report, stderr = verify(payload)
    assert code == 2 and stderr == ""  # no traceback
    assert report["supported"] is False and words in report["error"]


def test_the_report_has_the_shape_of_the_template():
    template = json.loads((SKILL / "assets" / "report-template.json").read_text(encoding="utf-8"))
    _, report, _ = verify(request(750, "travel-v2", "1-3", "2026-09-14"))
    assert set(report) == set(template) and set(report["checks"]) == set(template["checks"])


def test_the_package_is_laid_out_as_section_48_2_and_is_valid():
    for path in ("SKILL.md", "references/evidence-contract.md", "scripts/verify.py", "assets/report-template.json"):
        assert (SKILL / path).is_file()
    assert validate_folder(SKILL).valid
    text = (SKILL / "SKILL.md").read_text(encoding="utf-8")
    assert 'version: "1.0.0"' in text and "allowed-tools" not in text and "Use when" in text
    assert "import urllib" not in (SKILL / "scripts" / "verify.py").read_text() and "socket" not in (SKILL / "scripts" / "verify.py").read_text()
