"""Imports only point down: the package's floors are written here, not read from today's imports.

A module may import a module of its own floor or of a floor below, never one above; no modules import
each other in a circle (files, not packages); every import counts, at the top of a file, inside a
function or under TYPE_CHECKING. docs/DESIGN.md shows the same list.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "bert_explorer"
KIT = PACKAGE.parent / "tools" / "gpu_kit"  # the GPU kit: no floors of its own, but no circle either

# Top to bottom. Same-floor imports are allowed (no circles); the front ends never import each other.
FLOORS = [
    ("front ends", ["app", "cli"]),
    ("the science", ["analysis", "experiments"]),
    ("training", ["train"]),
    ("runs and background work", ["runs"]),
    ("the disk cache", ["disk_cache"]),
    ("models and data on disk", ["checkpoint", "data"]),
    ("names: tasks, the Hub, WordPiece", ["tasks", "hub", "hub_datasets", "hub_names", "hub_server", "tokenizer"]),
    ("the ground", ["model", "atomic", "full_disk", "fingerprint", "limits", "safe_text", "setting", "shared_work",
                    "wordpiece_vocab", "processes", "lock_backends", "file_lock", "shipped"]),
]
APART = {("app", "cli"), ("cli", "app")}


def _floor(module: str) -> tuple[int, str]:
    """(floor number, 0 = the top; the floor's entry) of ``bert_explorer.X...``."""
    head = module.split(".")[1]
    for i, (_, names) in enumerate(FLOORS):
        if head in names:
            return i, head
    raise AssertionError(f"{module} is on no floor: add it to FLOORS (and to docs/DESIGN.md)")


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for f in package.rglob("*.py"):
        parts = f.relative_to(package.parent.parent if package == KIT else package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f
    return out


def _imports(name: str, path: Path, known: dict, root: str = "bert_explorer.") -> set[str]:
    """Every module under ``root`` that ``name`` imports, anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")
                base = ".".join(up[:len(up) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        found.update(t for t in targets if t.startswith(root) and t in known)
    return found


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: _imports(name, path, known) - {name} for name, path in known.items() if name != "bert_explorer"}


def upward(graph) -> list[str]:
    out = []
    for a, targets in graph.items():
        for b in targets:
            (fa, ha), (fb, hb) = _floor(a), _floor(b)
            if fb < fa or (ha, hb) in APART:
                out.append(f"{a} -> {b} ({FLOORS[fa][0]} imports {FLOORS[fb][0]})")
    return sorted(out)


def circles(graph) -> list[list[str]]:
    """Strongly connected groups of two or more modules (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def test_every_import_points_down_and_none_goes_round_in_a_circle():
    graph = _graph()
    assert sum(map(len, graph.values())) > 300  # the imports were read (not an empty graph)
    assert upward(graph) == []
    assert circles(graph) == []


def test_the_gpu_kit_goes_round_in_no_circle():
    known = _modules(KIT)
    graph = {name: _imports(name, path, known, "tools.gpu_kit.") - {name} for name, path in known.items()}
    assert sum(map(len, graph.values())) > 10
    assert circles(graph) == []


def test_the_check_sees_an_import_planted_back_up_and_a_circle():
    graph = {k: set(v) for k, v in _graph().items()}
    graph["bert_explorer.atomic"].add("bert_explorer.app.state")  # the ground importing a page helper
    assert upward(graph) == ["bert_explorer.atomic -> bert_explorer.app.state (the ground imports front ends)"]
    assert any("bert_explorer.atomic" in c for c in circles(graph))  # state imports atomic, down the floors


def test_design_md_shows_the_same_floors():
    design = (PACKAGE.parent / "docs" / "DESIGN.md").read_text()
    for title, names in FLOORS:
        assert f"{title}: " + ", ".join(names) in design, title
