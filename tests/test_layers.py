"""The layers of docs/ARCHITECTURE.md hold: no import from a higher layer, no import cycle.

Every import statement of every module counts, also those inside functions (a lazy import is
still a dependency). A package's own `__init__` importing its submodules is not an edge of the
submodules (Python runs it before them in any case).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Layer of each top-level part, lowest first (docs/ARCHITECTURE.md).
LAYERS = {"kernels": 0, "workloads": 1, "harness": 2, "studies": 3, "dashboard": 4, "cli": 5}
FOLDERS = {"kernels": "kernels", "workloads": "workloads", "harness": "harness",
           "studies": "studies", "dashboard": "dashboard", "cli": "kvtune/cli"}


def module_files() -> dict[str, Path]:
    out = {}
    for part, folder in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            pieces = [p for p in rel.parts if p != "__init__"]
            prefix = "kvtune.cli" if part == "cli" else f"kvtune.{part}"
            out[".".join([prefix, *pieces])] = path
    out["kvtune"] = ROOT / "kvtune" / "__init__.py"
    out["kvtune.__main__"] = ROOT / "kvtune" / "__main__.py"
    return out


def imported_modules(path: Path, modules: dict) -> set[str]:
    """The kvtune modules `path` imports (the longest known module name of each import)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    found = set()
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name:
            found.add(name)
    return found


def layer_of(module: str) -> int:
    parts = module.split(".")
    if module in ("kvtune", "kvtune.__main__"):
        return LAYERS["cli"]
    return LAYERS[parts[1]]


def graph() -> dict[str, set[str]]:
    modules = module_files()
    edges = {}
    for name, path in modules.items():
        targets = imported_modules(path, modules) - {name}
        if path.name == "__init__.py":  # a package importing its own submodules
            targets = {t for t in targets if not t.startswith(name + ".")}
        edges[name] = targets
    return edges


def test_every_part_has_modules():
    modules = module_files()
    for part in LAYERS:
        prefix = "kvtune.cli" if part == "cli" else f"kvtune.{part}"
        assert any(m.startswith(prefix) for m in modules), part


def test_no_import_from_a_higher_layer():
    bad = [f"{src} -> {dst}" for src, dsts in graph().items() for dst in dsts
           if layer_of(dst) > layer_of(src) and src not in ("kvtune",)]
    assert not bad, "imports from a higher layer:\n" + "\n".join(sorted(bad))


def test_no_import_cycle():
    edges = graph()
    state, stack, cycles = {}, [], []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_walker_sees_lazy_imports(tmp_path):
    """The check would catch a lazy import from a higher layer (it is not blind to functions)."""
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from kvtune.studies import export\n")
    assert "kvtune.studies.export" in imported_modules(src, module_files())


def test_only_the_cli_imports_argparse():
    users = [name for name, path in module_files().items()
             if "argparse" in {n.split(".")[0] for n in _plain_imports(path)}
             and not name.startswith("kvtune.cli")]
    assert not users, f"argparse outside kvtune.cli: {users}"


def _plain_imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out
