"""Scripted research agents for tests: a responder that answers each stage of runs.research by its tool, from a small
table of angles, sources and claims, with knobs for the faults a test needs (a stage that fails, answers badly,
finds nothing, or refutes everything)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from skills_magic.models.base import ModelError
from skills_magic.models.scripted import ScriptedModel

ANGLES = {"surface": ["https://a.example/roofs", "https://b.example/meta"],
          "energy": ["https://c.example/vendor", "https://b.example/meta", "https://d.example/review"]}
CLAIMS = {"https://a.example/roofs": [("Green roofs were 20 C cooler than black roofs in July", 5)],
          "https://b.example/meta": [("Green roofs lower air temperature by 0.3 C", 4),
                                     ("green roofs were 20 C cooler than black roofs in July!", 3)],
          "https://c.example/vendor": [("Green roofs cut energy use by 75%", 4)],
          "https://d.example/review": [("Cooling energy savings range from 2% to 16%", 4)]}
USAGE = {"input_tokens": 1000, "output_tokens": 100}


def tool_of(request: dict[str, Any]) -> str:
    return next(t["name"] for t in request["tools"] if t.get("name", "").startswith("record_"))


def prompt_of(request: dict[str, Any]) -> str:
    return request["messages"][0]["content"]


@dataclass
class Agents:
    """The responder; `fail`: stage tools whose calls raise a model error; `malformed`: tools answered in text;
    `refute`: claim words every voter refutes; `underspecified`: the scope asks questions unless clarified."""

    fail: set[str] = field(default_factory=set)
    malformed: set[str] = field(default_factory=set)
    refute: tuple[str, ...] = ("75%",)
    underspecified: bool = False
    no_sources: bool = False
    no_claims: bool = False
    seen: list[str] = field(default_factory=list)

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        name, prompt = tool_of(request), prompt_of(request)
        self.seen.append(name)
        if name in self.fail:
            raise ModelError("the model is overloaded (scripted)", 529, "overloaded")
        if name in self.malformed:
            return {"text": "I would rather write prose.", "usage": USAGE}
        return {"tool_use": [{"name": name, "input": getattr(self, name)(prompt)}], "usage": USAGE}

    def record_scope(self, prompt: str) -> dict[str, Any]:
        clarified = "answers to earlier questions" in prompt
        return {"question": "Do green roofs cool cities?", "underspecified": self.underspecified and not clarified,
                "clarifying_questions": ["Which climate?", "Surface or air temperature?"] if self.underspecified else [],
                "angles": [{"angle": a, "query": f"green roofs {a}"} for a in ANGLES]}

    def record_search(self, prompt: str) -> dict[str, Any]:
        angle = re.search(r"\*\*Angle:\*\* (\w+)", prompt).group(1)
        urls = [] if self.no_sources else ANGLES[angle]
        return {"sources": [{"url": u, "title": u.split("/")[2]} for u in urls]}

    def record_fetch(self, prompt: str) -> dict[str, Any]:
        url = re.search(r"\*\*Source:\*\* (\S+)", prompt).group(1)
        found = [] if self.no_claims else CLAIMS[url]
        return {"claims": [{"claim": c, "quote": f"'{c}' says {url}", "importance": i} for c, i in found]}

    def record_verdict(self, prompt: str) -> dict[str, Any]:
        refuted = any(word in prompt for word in self.refute)
        return {"refuted": refuted, "evidence": "the review measured 2-16%" if refuted else "the quote says so",
                "confidence": "high"}

    def record_synthesise(self, prompt: str) -> dict[str, Any]:
        return {"executive_summary": "Green roofs cool their own surface a lot and the air a little.",
                "findings": [{"finding": "Roof surfaces are much cooler", "claims": [1]}],
                "caveats": ["few studies in hot climates"], "open_questions": ["What about heat waves?"]}


def scripted(agents: Agents | None = None) -> ScriptedModel:
    return ScriptedModel(responder=agents or Agents())
