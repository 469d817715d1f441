"""The package's shape, checked: no import loops among engine's modules (TYPE_CHECKING imports
included), no module reaching into another's private names, the public API as documented."""

import ast
from pathlib import Path

import engine

ROOT = Path(engine.__file__).resolve().parent


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) for every engine import in ``path``, wherever it sits."""
    here = _module(path)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "engine":
                out.append((target, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.split(".")[0] == "engine"]
    return out


def _graph() -> dict[str, set[str]]:
    modules = {_module(p): p for p in ROOT.rglob("*.py")}
    graph = {m: set() for m in modules}
    for m, path in modules.items():
        for target, names in _imports(path):
            for name in names:  # "from . import index" imports a module
                if f"{target}.{name}" in modules:
                    graph[m].add(f"{target}.{name}")
            if target in modules and target != m:
                graph[m].add(target)
    return graph


def test_no_import_loops():
    graph = _graph()
    # a package's __init__ re-exports its modules; loops are looked for among the modules themselves
    inits = {m for m in graph if (ROOT.parent / m.replace(".", "/") / "__init__.py").exists()}
    state: dict[str, int] = {}

    def visit(m, path):
        state[m] = 1
        for n in sorted(graph[m] - inits):
            if state.get(n) == 1:
                raise AssertionError("import loop: " + " -> ".join(path + [n]))
            if n not in state:
                visit(n, path + [n])
        state[m] = 2

    for m in sorted(set(graph) - inits):
        if m not in state:
            visit(m, [m])


def test_no_module_reads_another_modules_private_names():
    offenders = []
    for path in ROOT.rglob("*.py"):
        for target, names in _imports(path):
            offenders += [f"{_module(path)} imports {target}.{n}" for n in names if n.startswith("_")]
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                owner = node.value
                if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                    offenders.append(f"{_module(path)}:{node.lineno} reads .{node.attr}")
    # the one sanctioned reach: mlx-lm's TokenizerWrapper keeps the transformers tokenizer in _tokenizer
    offenders = [o for o in offenders if not o.endswith("reads ._tokenizer")]
    assert offenders == []


def test_public_api_is_small_and_complete():
    assert len(engine.__all__) <= 16
    for name in engine.__all__:
        assert getattr(engine, name) is not None
    assert issubclass(engine.errors.SchemaError, engine.ToolgateError)
