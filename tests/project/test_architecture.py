"""The layout stays easy to see (docs/ARCHITECTURE.md): no import cycle between aocsim's modules or
between its packages, the hardware rooms import one way (profiles <- physics <- engine), and no
module grows far past 300 lines. Imports are read from the source (deferred ones count too)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "aocsim"
MAX_LINES = 320  # "modules of about 100-300 lines"
# Packages whose sub-packages are rooms of their own in the package graph; any other nested package
# counts as part of its parent (aocsim.experiments.sweep is part of aocsim.experiments).
ROOMS = ("aocsim.hardware",)


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*.py"):
        name = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the aocsim modules it imports (the longest importable prefix of each name)."""
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(parts + ([base] if base else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                # a module's own package (its __init__) and the top package are not edges
                if target and target != name and not name.startswith(target + ".") and target != "aocsim":
                    graph[name].add(target)
    return graph


def package_of(module: str, mods: dict[str, Path]) -> str:
    """The package a module counts in: aocsim.X, or aocsim.hardware.X for the hardware rooms;
    a top-level module (aocsim.errors) is its own."""
    parts = module.split(".")
    for room in ROOMS:
        depth = len(room.split(".")) + 1
        if module.startswith(room + ".") and len(parts) >= depth:
            return ".".join(parts[:depth])
    return ".".join(parts[:2])


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Each edge (a, b) that closes a cycle (b reaches a)."""
    def reaches(start: str, goal: str) -> bool:
        stack, seen = [start], set()
        while stack:
            v = stack.pop()
            if v == goal:
                return True
            if v not in seen:
                seen.add(v)
                stack.extend(graph.get(v, ()))
        return False
    return [(a, b) for a in sorted(graph) for b in sorted(graph[a]) if reaches(b, a)]


def package_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for a, targets in import_graph(mods).items():
        pa = package_of(a, mods)
        graph.setdefault(pa, set())
        for b in targets:
            pb = package_of(b, mods)
            if pb != pa:
                graph[pa].add(pb)
    return graph


def test_no_import_cycle_between_modules() -> None:
    found = cycles(import_graph(modules()))
    assert not found, "import cycles (each edge closes one): " + "; ".join(f"{a} -> {b}" for a, b in found)


def test_no_import_cycle_between_packages() -> None:
    found = cycles(package_graph(modules()))
    assert not found, "package cycles (each edge closes one): " + "; ".join(f"{a} -> {b}" for a, b in found)


def test_hardware_rooms_import_one_way() -> None:
    """profiles import nothing of physics or engine; physics nothing of the engine."""
    graph = package_graph(modules())
    below = {"aocsim.hardware.profiles": {"aocsim.hardware.physics", "aocsim.hardware.engine"},
             "aocsim.hardware.physics": {"aocsim.hardware.engine"}}
    for room, forbidden in below.items():
        assert not graph.get(room, set()) & forbidden, f"{room} imports {graph[room] & forbidden}"


def test_the_checker_finds_a_cycle() -> None:
    """The graph code itself: a cycle planted in a toy package is found, a chain is not."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert {e for e in cycles(graph)} == {("a", "b"), ("b", "c"), ("c", "a")}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_module_is_much_longer_than_300_lines() -> None:
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"
