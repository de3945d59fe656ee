"""Reading the small YAML or JSON files users write for skills_magic (scripted turns, prompt sets)."""

from __future__ import annotations

import json
import os
from typing import Any

from skills_magic.errors import SkillsMagicError


class DataFileError(SkillsMagicError, ValueError):
    """A file that is not valid YAML or JSON."""


def read_yaml_or_json(path: str | os.PathLike) -> Any:
    """The data in a .json file, or in YAML for any other name (YAML is a superset of JSON)."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except UnicodeDecodeError as error:
        raise DataFileError(f"{os.path.basename(path)} is not UTF-8 text: {error}") from None
    try:
        if path.endswith(".json"):
            return json.loads(text)
        import yaml

        return yaml.safe_load(text)
    except ValueError as error:  # json.JSONDecodeError
        raise DataFileError(f"{os.path.basename(path)} is not valid JSON: {error}") from None
    except Exception as error:  # yaml.YAMLError: PyYAML is imported lazily, so it is caught here by type name
        if type(error).__module__.startswith("yaml"):
            mark = getattr(error, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            raise DataFileError(f"{os.path.basename(path)} is not valid YAML{where}: {getattr(error, 'problem', error)}") from None
        raise
