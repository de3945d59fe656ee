"""skills_magic: Agent Skills as first-class, testable objects in Jupyter.

`import skills_magic` stays light: the public names below are imported on first use, and IPython, ipywidgets
and anthropic are only imported by the parts that need them.
"""

from __future__ import annotations

__version__ = "0.1.0"

# public name -> module that defines it (loaded on first attribute access)
_LAZY = {
    "Skill": "skills.skill",
    "Diagnostic": "skills.skill",
    "read_skill_file": "skills.skill",
    "validate_path": "skills.validate",
    "Catalog": "skills.catalog",
    "Source": "skills.catalog",
    "plan_listing": "skills.listing",
    "SkillsSession": "session",
    "Orchestra": "runs.orchestrate",
    "Stage": "runs.orchestrate",
    "BARRIER": "runs.orchestrate",
    "Abstention": "runs.orchestrate",
    "SkillsMagicError": "errors",
    "SkillNotFound": "errors",
}

# a module's path before the package had folders -> where it lives now; `import skills_magic.sandbox` keeps working
MOVED = {
    "skill": "skills.skill",
    "find": "skills.find",
    "catalog": "skills.catalog",
    "validate": "skills.validate",
    "listing": "skills.listing",
    "lint": "skills.lint",
    "agent": "runs.agent",
    "disclosure": "runs.disclosure",
    "verify": "runs.verify",
    "evals": "runs.evals",
    "evals_batch": "runs.batch_evals",
    "batch": "models.batch",
    "policy": "safety.policy",
    "trust": "safety.trust",
    "manifest": "safety.manifest",
    "gate": "safety.gate",
    "execute": "safety.execute",
    "sandbox": "safety.sandbox",
    "netproxy": "safety.netproxy",
    "changes": "safety.working.changes",
    "hints": "safety.hints",
    "db": "records.db",
    "ledger": "records.ledger",
    "magics": "notebook.magics",
    "display": "notebook.views",
    "widgets": "notebook.widgets",
}

__all__ = sorted(_LAZY) + ["load_ipython_extension", "unload_ipython_extension", "__version__"]


def __getattr__(name: str):
    import importlib

    if name in MOVED:  # `from skills_magic import sandbox`, written before the folders
        return importlib.import_module(f"skills_magic.{MOVED[name]}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'skills_magic' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"skills_magic.{module}"), name)
    globals()[name] = value
    return value


class _OldPaths:
    """Finds `skills_magic.<old flat name>` as the very module object at its new path (one module, two names), so
    code and tests written against the flat layout, `monkeypatch.setattr("skills_magic.sandbox.X", ...)` included,
    see and change the module that runs."""

    @staticmethod
    def find_spec(fullname, path=None, target=None):
        package, _, old = fullname.partition(".")
        if package != "skills_magic" or old not in MOVED:
            return None
        import importlib.util

        return importlib.util.spec_from_loader(fullname, _OldPaths)

    @staticmethod
    def create_module(spec):
        import importlib

        module = importlib.import_module(f"skills_magic.{MOVED[spec.name.partition('.')[2]]}")
        spec.loader_state = module.__spec__  # the import system is about to put the alias's spec on it
        return module

    @staticmethod
    def exec_module(module):
        module.__spec__ = module.__spec__.loader_state


import sys as _sys  # noqa: E402

if not any(finder is _OldPaths for finder in _sys.meta_path):
    _sys.meta_path.append(_OldPaths)


def load_ipython_extension(ipython) -> None:
    """`%load_ext skills_magic`: register the `%skills` magics on this shell."""
    from skills_magic.notebook.magics import register

    register(ipython)


def unload_ipython_extension(ipython) -> None:
    from skills_magic.notebook.magics import unregister

    unregister(ipython)
