"""`import skills_magic` stays light: public names load on first use, heavy dependencies only where needed.

Each check runs in a fresh interpreter, so modules imported by pytest or by other tests cannot hide an import.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

HEAVY = ("anthropic", "IPython", "ipywidgets", "pydantic", "yaml")
NEVER_IN_THE_CORE = ("anthropic", "IPython", "ipywidgets")


def run_python(code: str) -> dict:
    """Run code in a fresh interpreter; it prints one JSON value, which is returned."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_import_skills_magic_loads_no_heavy_dependency():
    loaded = run_python(
        f"""
        import json, sys
        import skills_magic
        print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))
        """
    )

    assert loaded == []


def test_public_names_resolve_lazily_to_their_defining_modules():
    found = run_python(
        """
        import json, sys
        import skills_magic
        before = sorted(m for m in sys.modules if m.startswith("skills_magic."))
        resolved = {name: getattr(skills_magic, name).__module__ for name in skills_magic._LAZY}
        print(json.dumps({"before": before, "resolved": resolved}))
        """
    )

    assert found["before"] == []
    assert found["resolved"] == {
        "Skill": "skills_magic.skills.skill",
        "Diagnostic": "skills_magic.skills.skill",
        "read_skill_file": "skills_magic.skills.skill",
        "validate_path": "skills_magic.skills.validate",
        "Catalog": "skills_magic.skills.catalog",
        "Source": "skills_magic.skills.catalog",
        "plan_listing": "skills_magic.skills.listing",
        "SkillsSession": "skills_magic.session",
        "Orchestra": "skills_magic.runs.orchestrate",
        "Stage": "skills_magic.runs.orchestrate",
        "BARRIER": "skills_magic.runs.orchestrate",
        "Abstention": "skills_magic.runs.orchestrate",
        "SkillsMagicError": "skills_magic.errors",
        "SkillNotFound": "skills_magic.errors",
    }


def test_a_lazy_name_is_the_same_object_as_in_its_module():
    import skills_magic
    from skills_magic.session import SkillsSession
    from skills_magic.skills.skill import Skill

    assert skills_magic.Skill is Skill
    assert skills_magic.SkillsSession is SkillsSession
    assert issubclass(skills_magic.SkillNotFound, skills_magic.SkillsMagicError)


def test_using_one_public_name_imports_only_what_it_needs():
    loaded = run_python(
        f"""
        import json, sys
        import skills_magic
        skills_magic.SkillsMagicError
        errors_only = [m for m in {HEAVY!r} if m in sys.modules]
        skills_magic.Skill
        after_skill = [m for m in {HEAVY!r} if m in sys.modules]
        print(json.dumps({{"errors_only": errors_only, "after_skill": after_skill}}))
        """
    )

    assert loaded["errors_only"] == []
    assert sorted(loaded["after_skill"]) == ["pydantic", "yaml"]


def test_unknown_attribute_raises_attribute_error():
    import skills_magic

    with pytest.raises(AttributeError):
        skills_magic.no_such_name  # noqa: B018
    assert not hasattr(skills_magic, "no_such_name")


def test_star_import_gives_every_public_name():
    names = run_python(
        """
        import json
        namespace = {}
        exec("from skills_magic import *", namespace)
        print(json.dumps(sorted(k for k in namespace if not k.startswith("__") or k == "__version__")))
        """
    )

    import skills_magic

    assert names == sorted(skills_magic.__all__)


@pytest.mark.parametrize(
    "module",
    ["skills_magic.skills.skill", "skills_magic.skills.validate", "skills_magic.skills.catalog", "skills_magic.skills.listing",
     "skills_magic.session", "skills_magic.notebook.views", "skills_magic.errors", "skills_magic.cli"],
)
def test_the_core_never_imports_ipython_ipywidgets_or_anthropic(module):
    loaded = run_python(
        f"""
        import json, sys
        import {module}
        print(json.dumps([m for m in {NEVER_IN_THE_CORE!r} if m in sys.modules]))
        """
    )

    assert loaded == []


def test_the_cli_validates_without_importing_ipython(sample_skills):
    loaded = run_python(
        f"""
        import contextlib, io, json, sys
        from skills_magic.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            code = main(["validate", {str(sample_skills)!r}])
        print(json.dumps({{"code": code, "loaded": [m for m in {NEVER_IN_THE_CORE!r} if m in sys.modules]}}))
        """
    )

    assert loaded == {"code": 0, "loaded": []}


def test_version_matches_the_package_metadata():
    from importlib.metadata import version

    import skills_magic

    assert skills_magic.__version__ == version("skills-magic")
