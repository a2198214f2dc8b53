"""One function per name: no two bertfam modules define a public module-level function or class of the same
name (read statically, as the import-layer test reads imports). Names that one protocol repeats are listed
with their reason; a new duplicate fails, and so does a listed one that no longer occurs."""
import ast
import collections

from .test_import_layers import _tree, modules

# name -> why several modules define it
ALLOWED_DUPLICATES = {
    "register": "every command module's hook: the cli calls register(subparsers) on each",
    "main": "a script's entry point (bertfam.cli, python -m bertfam.multimodal.synthetic)",
    "evaluate": "the official MRC scorers (evaluation.dureader, evaluation.squad), one per metric module: "
                "references + predictions -> that metric's numbers",
    "evaluate_files": "the same two scorers on a data file and a prediction file",
}


def definitions() -> dict:
    """public module-level function / class name -> the modules that define it."""
    found = collections.defaultdict(set)
    for name, path in modules().items():
        for node in _tree(path).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and \
                    not node.name.startswith("_"):
                found[node.name].add(name)
    return found


def test_no_two_modules_define_one_name():
    dup = {n: sorted(m) for n, m in definitions().items() if len(m) > 1 and n not in ALLOWED_DUPLICATES}
    assert not dup, "one name, several definitions (rename the one that means something else): " + "; ".join(
        f"{n}: {', '.join(m)}" for n, m in sorted(dup.items()))


def test_allowed_duplicates_still_occur():
    d = definitions()
    assert not [n for n in ALLOWED_DUPLICATES if len(d.get(n, ())) < 2], \
        "an allowed duplicate no longer occurs: remove it from the list"
