"""The package's import graph keeps its shape: no circles, and a core that runs without a notebook or the SDK.

The graph is read from the source with `ast` (nothing is imported): every `import` and `from ... import` of a
`skills_magic` module, relative or absolute, at module level or inside a function. Imports under
`if TYPE_CHECKING:` never run and are left out. What `import skills_magic` loads at run time is checked in a fresh
interpreter, here and in tests/test_import.py.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "skills_magic"
FRONT_END_LIBRARIES = ("IPython", "ipywidgets", "anthropic")  # the core must work in a CI job with none of them
# the modules allowed to import them at import time: the notebook front end, the CLI and the SDK's client
NOT_CORE = frozenset({"skills_magic.notebook.magics", *(f"skills_magic.notebook.magics.{p.stem}" for p in (PACKAGE / "notebook" / "magics").glob("*.py") if p.stem != "__init__"),
                      "skills_magic.notebook.widgets", "skills_magic.cli", "skills_magic.models.anthropic"})
MAX_MODULE_LINES = 450  # a module a newcomer can read whole
MAX_SESSION_LINES = 350  # the session holds state and hands each operation to its subject
# the house's floors, ground first: a module imports only from lower floors, or from its own folder
LAYERS = (
    ("errors",),  # the one error root
    ("clock", "paths", "datafiles", "redact"),  # the ground every subject stands on
    ("skills",),  # a skill read, found, checked, listed
    ("safety", "models"),  # side by side: neither imports the other
    ("records",),
    ("runs",),
    ("session",),
    ("notebook",),  # the notebook front end: magics, and views that take values
    ("cli",),  # the other front end, printing the same views as text
    ("__init__", "__main__"),  # the package's face: lazy names and the extension hooks
)
# modules that do the work: front ends reach them only through the session, views never
MACHINERY = frozenset({"skills_magic.safety.gate", "skills_magic.safety.sandbox", "skills_magic.safety.execute",
                       "skills_magic.safety.working.changes", "skills_magic.safety.netproxy", "skills_magic.safety.manifest",
                       "skills_magic.runs.agent", "skills_magic.runs.evals", "skills_magic.records.db",
                       "skills_magic.skills.find", "skills_magic.models.batch", "skills_magic.models.choice"})
FRONT_ENDS = ("skills_magic.cli", "skills_magic.notebook")
VIEWS = "skills_magic.notebook.views"


@dataclass(frozen=True)
class Import:
    """One import statement's target, where it is, and whether it runs when its module is imported."""

    target: str  # a module of the package, or the top-level name of another distribution
    where: str  # file:line
    top_level: bool  # False: inside a function, so it runs only when that function is called


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(node: ast.AST, in_function: bool = False):
    """(import node, inside a function) for every import that can run, in source order."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            children = child.orelse  # the `if TYPE_CHECKING:` body is for type checkers only
        else:
            children = [child]
        for statement in children:
            if isinstance(statement, (ast.Import, ast.ImportFrom)):
                yield statement, in_function
            nested = in_function or isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            yield from _import_nodes(statement, nested)


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules one statement imports: `from pkg import sub` imports the submodule, not only the package."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        package = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
        base = package[: len(package) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    submodules = [f"{source}.{alias.name}" for alias in node.names if f"{source}.{alias.name}" in MODULES]
    return submodules + ([source] if len(submodules) < len(node.names) else [])


def import_graph() -> dict[str, list[Import]]:
    """Each module of the package -> its imports of package modules and of other distributions (top-level names)."""
    graph: dict[str, list[Import]] = {}
    for module, path in MODULES.items():
        found = []
        for node, in_function in _import_nodes(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            for target in _targets(module, node):
                if target == module:
                    continue
                name = target if target in MODULES else target.split(".")[0]
                found.append(Import(name, f"{path.relative_to(PACKAGE.parent)}:{node.lineno}", not in_function))
        graph[module] = found
    return graph


def find_circle(graph: dict[str, list[Import]], top_level_only: bool = False) -> list[Import] | None:
    """One import circle between package modules, as the imports that close it, or None."""
    done: set[str] = set()  # modules every import below which was followed without finding a circle

    def visit(module: str, modules: list[str], imports: list[Import]) -> list[Import] | None:
        for edge in graph.get(module, []):
            if edge.target not in MODULES or (top_level_only and not edge.top_level) or edge.target in done:
                continue
            if edge.target in modules:
                return imports[modules.index(edge.target):] + [edge]
            circle = visit(edge.target, modules + [edge.target], imports + [edge])
            if circle:
                return circle
        done.add(module)
        return None

    for module in graph:
        circle = visit(module, [module], [])
        if circle:
            return circle
    return None


def describe(circle: list[Import]) -> str:
    """e.g. `a -> b (skills_magic/a.py:3) -> a (skills_magic/b.py:9, in a function)`."""
    return circle[-1].target + " -> " + " -> ".join(f"{e.target} ({e.where}{'' if e.top_level else ', in a function'})" for e in circle)


def test_the_graph_sees_top_level_function_level_and_package_imports():
    graph = import_graph()
    edges = {(module, e.target, e.top_level) for module, imports in graph.items() for e in imports}

    assert ("skills_magic.skills.catalog", "skills_magic.skills.find", True) in edges
    assert ("skills_magic.session", "skills_magic.runs.claude_code", False) in edges  # imported where a run needs it
    assert ("skills_magic.safety.gate", "skills_magic.safety.sandbox", True) in edges  # `from skills_magic import sandbox`
    assert ("skills_magic.notebook.magics", "IPython", True) in edges


def test_the_circle_finder_reports_a_circle_it_is_given():
    graph = {"skills_magic.skills.skill": [Import("skills_magic.skills.catalog", "a.py:1", True)],
             "skills_magic.skills.catalog": [Import("skills_magic.skills.validate", "b.py:2", True)],
             "skills_magic.skills.validate": [Import("skills_magic.skills.catalog", "c.py:3", False)]}

    circle = find_circle(graph)

    assert [e.target for e in circle] == ["skills_magic.skills.validate", "skills_magic.skills.catalog"]
    assert find_circle(graph, top_level_only=True) is None


def test_no_module_imports_back_into_a_module_that_imports_it():
    circle = find_circle(import_graph())

    assert circle is None, f"import circle: {describe(circle)}"


def test_the_core_imports_no_front_end_library_at_import_time():
    """Followed through every top-level import, so a core module cannot reach IPython through another module."""
    graph = import_graph()
    reached = {}
    for module in sorted(set(MODULES) - NOT_CORE):
        chain: dict[str, list[Import]] = {module: []}
        todo = [module]
        while todo:
            current = todo.pop()
            for edge in graph[current]:
                if edge.top_level and edge.target not in chain:
                    chain[edge.target] = chain[current] + [edge]
                    if edge.target in MODULES:
                        todo.append(edge.target)
        for library in FRONT_END_LIBRARIES:
            if library in chain:
                reached[module] = " -> ".join(f"{e.target} ({e.where})" for e in chain[library])

    assert reached == {}


def test_import_skills_magic_does_not_open_sqlite():
    """sqlite3 comes with the first record written; test_import.py checks IPython, ipywidgets and anthropic."""
    result = subprocess.run(
        [sys.executable, "-c", "import json, sys, skills_magic; print(json.dumps('sqlite3' in sys.modules))"],
        capture_output=True, text=True, timeout=600)

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) is False


def test_a_module_s_flat_path_from_before_the_folders_is_the_same_module():
    """Code written against `skills_magic.sandbox` keeps working, and a patch through the old name reaches the
    module that runs."""
    import importlib

    import skills_magic

    for old, new in skills_magic.MOVED.items():
        assert importlib.import_module(f"skills_magic.{old}") is importlib.import_module(f"skills_magic.{new}")
        assert getattr(skills_magic, old) is importlib.import_module(f"skills_magic.{new}")
        assert importlib.import_module(f"skills_magic.{new}").__spec__.name == f"skills_magic.{new}"


def floor(module: str) -> tuple[int, str]:
    """(the floor of LAYERS, the folder or top-level module) a package module stands in."""
    parts = module.split(".")
    place = "__init__" if len(parts) == 1 else parts[1]
    for number, names in enumerate(LAYERS):
        if place in names:
            return number, place
    raise AssertionError(f"{module} stands in no floor of LAYERS: add its folder there")


def test_every_import_points_down_a_floor_or_stays_in_its_folder():
    """Function-level imports too: a lazy import that runs back up is still a hidden dependency."""
    upward = []
    for module, imports in import_graph().items():
        here, folder = floor(module)
        for edge in imports:
            if edge.target in MODULES:
                there, other = floor(edge.target)
                if other != folder and there >= here:
                    upward.append(f"{module} -> {edge.target} ({edge.where})")

    assert upward == []


def test_the_floor_check_catches_an_import_back_up():
    assert floor("skills_magic.safety.sandbox") > floor("skills_magic.skills.skill")
    assert floor("skills_magic.safety.gate")[0] == floor("skills_magic.models.base")[0]  # side by side: refused both ways
    assert floor("skills_magic.notebook.views.runs")[0] > floor("skills_magic.session")[0]


def test_no_module_is_too_long_to_read_whole():
    sizes = {module: len(path.read_text(encoding="utf-8").splitlines()) for module, path in MODULES.items()}

    assert {m: n for m, n in sizes.items() if n >= MAX_MODULE_LINES} == {}
    assert sizes["skills_magic.session"] < MAX_SESSION_LINES


def test_views_take_values_and_never_a_session():
    """A view imports value types only: never the session, the magics, or a module that does work."""
    reached = [f"{module} -> {edge.target} ({edge.where})" for module, imports in import_graph().items()
               if module.startswith(VIEWS) for edge in imports
               if edge.target == "skills_magic.session" or edge.target.startswith("skills_magic.notebook.magics")
               or edge.target in MACHINERY]

    assert reached == []


def test_front_ends_reach_the_machinery_only_through_the_session():
    reached = [f"{module} -> {edge.target} ({edge.where})" for module, imports in import_graph().items()
               if module.startswith(FRONT_ENDS) for edge in imports if edge.target in MACHINERY]

    assert reached == []


def _catches_value_error(handler: ast.ExceptHandler) -> bool:
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(n, ast.Name) and n.id == "ValueError" for n in names if n is not None)


def test_no_front_end_takes_a_value_error_for_a_user_error():
    """User errors are SkillsMagicErrors; a ValueError from anywhere else is a bug and must show as one. The one
    exception is a try around shlex.split alone (or the `split` parameter defaulting to it), whose only error is a
    ValueError about the user's quoting."""
    found = []
    for module, path in MODULES.items():
        if not module.startswith(FRONT_ENDS):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Try) or not any(_catches_value_error(h) for h in node.handlers):
                continue
            calls = [c for s in node.body for c in ast.walk(s) if isinstance(c, ast.Call)]
            only_shlex = calls and all(  # shlex.split, or a `split` parameter that defaults to it
                (isinstance(c.func, ast.Attribute) and c.func.attr == "split" and getattr(c.func.value, "id", "") == "shlex")
                or (isinstance(c.func, ast.Name) and c.func.id == "split") for c in calls)
            if not only_shlex:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")

    assert found == []
