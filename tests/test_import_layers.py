"""Import layering of the bertfam package, read statically from the source.

Every module is parsed with `ast`; relative imports are resolved and imports inside functions count too (a
lazy import is still a dependency, it only defers the failure). Imports by string (importlib, as the cli
loads its command modules) are not seen. Known exceptions are listed with their reason; a new violation
fails, and so does an exception that no longer occurs (delete it then).
"""
import ast
import functools
import os

import pytest

from bertfam import cli

from .conftest import ROOT

PKG = "bertfam"
ENTRY = {"bertfam.__main__"}  # `python -m bertfam`; the console script is bertfam.cli:main itself
_FRONT_ENDS = ("bertfam.serving", "bertfam.cli", "bertfam.commands")

# (importing package or module, packages it must not import)
CONTRACTS = {
    "bertfam.modeling": ("bertfam.training", "bertfam.tasks") + _FRONT_ENDS,
    "bertfam.data": ("bertfam.modeling", "bertfam.tasks") + _FRONT_ENDS,
    "bertfam.evaluation": ("bertfam.modeling", "bertfam.tasks") + _FRONT_ENDS,
}

# (importing package, the only packages it may import): a command turns its options (and --config RUN.json)
# into a run config and calls its runner (bertfam.runners), which does the work; the library below the
# runners is not the command's to call. Config types: bertfam.config, bertfam.errors and the runners' own
# config dataclasses; `serve` runs bertfam.serving.
ONLY_IMPORTS = {
    "bertfam.commands": ("bertfam.runners", "bertfam.serving", "bertfam.config", "bertfam.errors", "bertfam.utils",
                         "bertfam.commands"),
}

# (importer, imported) -> why it is tolerated
ALLOWED = {
    ("bertfam.commands.pretrain", "bertfam.commands.multimodal"):
        "`bertfam pretrain --modality` is `bertfam multimodal pretrain` under the text command's name; it maps "
        "its options through that command's pretrain_from_generic_args (lazily, only with --modality)",
}

# edges between top-level units that close a cycle -> why it is tolerated (none today: config.resolve_config
# once imported convert.hf lazily; resolving a config is checkpoint I/O, bertfam.checkpoint, above both)
ALLOWED_CYCLE_EDGES: dict = {}

# (importer, imported module, name) of a `from module import _name` across modules -> why it is tolerated
ALLOWED_PRIVATE: dict = {}
# (importer, imported module, name) where the module defines no such name -> why it is tolerated
ALLOWED_MISSING: dict = {}


# ---------------------------------------------------------------- the graph
def _module_name(path: str) -> str:
    rel = os.path.relpath(path, ROOT)[:-len(".py")].replace(os.sep, ".")
    return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


@functools.lru_cache(maxsize=None)
def modules() -> dict:
    """module name -> source path, for every .py file of the package."""
    found = {}
    for d, _, files in os.walk(os.path.join(ROOT, PKG)):
        for f in files:
            if f.endswith(".py"):
                found[_module_name(os.path.join(d, f))] = os.path.join(d, f)
    return found


def _from_base(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module
    parts = package.split(".")[:len(package.split(".")) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def _imports(name: str, path: str) -> set:
    tree = _tree(path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(node, package)
            out.add(base)
            # `from pkg import mod` imports the module pkg.mod, not just a name of pkg
            out.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules())
    return {m for m in out if _under(m, PKG)}


@functools.lru_cache(maxsize=None)
def _tree(path: str) -> ast.Module:
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), filename=path)


@functools.lru_cache(maxsize=None)
def imported_names() -> frozenset:
    """(importer, imported module, name) of every `from module import name` of one bertfam module from
    another (a name that is itself a submodule is left out)."""
    out = set()
    for name, path in modules().items():
        package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom):
                base = _from_base(node, package)
                if _under(base, PKG) and base != name:
                    out.update((name, base, a.name) for a in node.names if f"{base}.{a.name}" not in modules())
    return frozenset(out)


def _top_level_names(tree: ast.Module) -> set:
    """Names a module binds at its top level (definitions, assignments, imports; inside if / try too)."""
    names, todo = set(), list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.If, ast.Try)):
            todo += node.body + node.orelse + getattr(node, "finalbody", []) + \
                [x for h in getattr(node, "handlers", []) for x in h.body]
    return names


@functools.lru_cache(maxsize=None)
def graph() -> dict:
    """module -> the bertfam modules it imports."""
    return {m: frozenset(_imports(m, p) - {m}) for m, p in modules().items()}


def edges() -> set:
    return {(a, b) for a, targets in graph().items() for b in targets}


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _check(found: set) -> None:
    """No violation in `found` beyond the allowed ones."""
    new = sorted(found - set(ALLOWED))
    assert not new, "layering violations (importer, imported): " + "; ".join(map(str, new))


# ---------------------------------------------------------------- contracts
def test_graph_sees_relative_and_function_level_imports():
    g = graph()
    assert "bertfam.errors" in g["bertfam.data.mrc"]  # `from ..errors import ...`
    assert "bertfam.knowledge" in g["bertfam.runners.finetune"]  # inside _kbert_inputs
    assert "bertfam.modeling.model" in g["bertfam.modeling"]  # `from .model import ...` in a package


@pytest.mark.parametrize("layer", sorted(CONTRACTS))
def test_lower_layers_do_not_import_upper_ones(layer):
    _check({(a, b) for a, b in edges() if _under(a, layer) and any(_under(b, f) for f in CONTRACTS[layer])})


@pytest.mark.parametrize("layer", sorted(ONLY_IMPORTS))
def test_layers_import_only_what_they_may(layer):
    _check({(a, b) for a, b in edges() if _under(a, layer) and not any(_under(b, p) for p in ONLY_IMPORTS[layer])})


def test_only_the_entry_imports_the_cli():
    _check({(a, b) for a, b in edges() if _under(b, "bertfam.cli") and a not in ENTRY})


def _command_module(name: str) -> bool:
    return name in {f"bertfam.commands.{c}" for c in cli.COMMAND_MODULES}


def test_command_modules_are_loaded_by_the_cli_only():
    """The library never imports bertfam.commands; a command module uses the shared helpers of the package
    (bertfam.commands.common and the like) but no other area's command module."""
    found = set()
    for a, b in edges():
        if not _under(b, "bertfam.commands") or a == "bertfam.cli":
            continue
        if not _under(a, "bertfam.commands") or _command_module(b):
            found.add((a, b))
    _check(found)


def test_no_private_names_imported_across_modules():
    """`from bertfam.x import _name` reaches into another module's internals: what other modules use is
    public (checkpoint I/O, for one, is bertfam.checkpoint's read_weights / load_state / with_task ...)."""
    found = {(a, m, n) for a, m, n in imported_names() if n.startswith("_") and not n.startswith("__")}
    new = sorted(found - set(ALLOWED_PRIVATE))
    assert not new, "private names imported (importer, module, name): " + "; ".join(map(str, new))


def test_imported_names_exist():
    """Every name imported from a bertfam module is defined there: a lazy import inside a function fails
    only when the function runs, so a moved or renamed function leaves no stale import behind."""
    defined = {m: _top_level_names(_tree(p)) for m, p in modules().items()}
    found = {(a, m, n) for a, m, n in imported_names() if m in defined and n != "*" and n not in defined[m]}
    new = sorted(found - set(ALLOWED_MISSING))
    assert not new, "imported names that do not exist (importer, module, name): " + "; ".join(map(str, new))


def test_allowed_violations_still_occur():
    assert not [e for e in list(ALLOWED) + list(ALLOWED_CYCLE_EDGES) if e not in edges()], \
        "an allowed exception no longer occurs: remove it from the list"
    assert not [e for e in list(ALLOWED_PRIVATE) + list(ALLOWED_MISSING) if e not in imported_names()], \
        "an allowed exception no longer occurs: remove it from the list"


# ---------------------------------------------------------------- cycles between top-level units
def _unit(name: str) -> str:
    """bertfam.X for a subpackage or top-level module X; bertfam for the package's __init__."""
    return ".".join(name.split(".")[:2])


def unit_graph() -> dict:
    g: dict = {}
    for a, b in edges() - set(ALLOWED_CYCLE_EDGES):
        g.setdefault(_unit(a), set())
        g.setdefault(_unit(b), set())
        if _unit(a) != _unit(b):
            g[_unit(a)].add(_unit(b))
    return g


def find_cycle(g: dict):
    """One cycle of `g` as a list of nodes (first == last), or None."""
    state, path = {}, []

    def visit(v):
        state[v] = "open"
        path.append(v)
        for w in sorted(g[v]):
            if state.get(w) == "open":
                return path[path.index(w):] + [w]
            if w not in state:
                found = visit(w)
                if found:
                    return found
        state[v] = "done"
        path.pop()
        return None

    for v in sorted(g):
        if v not in state:
            found = visit(v)
            if found:
                return found
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles_between_top_level_units():
    cycle = find_cycle(unit_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def module_graph() -> dict:
    """module -> the modules it imports, leaving out its own enclosing packages (`from . import x` runs the
    package's __init__, which is already being imported)."""
    g = {m: set() for m in graph()}
    for a, b in edges():
        if not _under(a, b):
            g[a].add(b)
            g.setdefault(b, set())
    return g


def test_no_import_cycles_between_modules():
    """Within a package too (multimodal.hf and multimodal.model once imported each other lazily): a cycle
    that a function-level import hides still ties the two modules into one."""
    cycle = find_cycle(module_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
