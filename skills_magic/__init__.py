"""skills_magic: Agent Skills as first-class, testable objects in Jupyter.

`import skills_magic` stays light: the public names below are imported on first use, and IPython, ipywidgets
and anthropic are only imported by the parts that need them.
"""

from __future__ import annotations

__version__ = "0.1.0"

# public name -> module that defines it (loaded on first attribute access)
_LAZY = {
    "Skill": "skill",
    "Diagnostic": "skill",
    "read_skill_file": "skill",
    "validate_path": "validate",
    "Catalog": "catalog",
    "Source": "catalog",
    "plan_listing": "listing",
    "SkillsSession": "session",
    "SkillsMagicError": "errors",
    "SkillNotFound": "errors",
}

__all__ = sorted(_LAZY) + ["load_ipython_extension", "unload_ipython_extension", "__version__"]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'skills_magic' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"skills_magic.{module}"), name)
    globals()[name] = value
    return value


def load_ipython_extension(ipython) -> None:
    """`%load_ext skills_magic`: register the `%skills` magics on this shell."""
    from skills_magic.magics import register

    register(ipython)


def unload_ipython_extension(ipython) -> None:
    from skills_magic.magics import unregister

    unregister(ipython)
