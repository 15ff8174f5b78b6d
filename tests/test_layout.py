"""The package's layout: no library module over ``MAX_LINES`` lines, at most
``MAX_TOP_LEVEL`` modules at the top level, no import cycle among ``llome_jax`` modules
(function-level, lazy, imports included), and no arrow back up between the floors of
:data:`FLOORS` (a module imports only modules of its own floor or below).

Imports are read with :mod:`ast`, nothing is imported. ``import llome_jax.a.b`` and
``from llome_jax.a import b`` (``b`` a submodule) are edges to ``llome_jax.a.b`` only, not to the
package ``llome_jax.a`` that Python initialises on the way; ``from llome_jax.a import name`` (not
a submodule) is an edge to ``llome_jax.a``. Relative imports resolve the same way. Imports under
``if TYPE_CHECKING:`` never run and are not edges.
"""

from __future__ import annotations

import ast
import collections
import pathlib

PACKAGE = "llome_jax"
PACKAGE_DIR = pathlib.Path(__file__).resolve().parents[1] / PACKAGE

#: One concern per module; a module that grows past this is split by concern (BUILD.md §2).
MAX_LINES = 600
#: The top level holds the few modules everything shares; the rest live in packages by concern.
MAX_TOP_LEVEL = 12

#: The floors of the import graph, bottom up: a module's floor is that of its longest matching
#: prefix (``llome_jax`` alone means the package's ``__init__`` only); a module imports only its
#: own floor or lower ones. The GA package spans two floors: its operators and whole runs are
#: what the base's round 0 runs, its plug-in stands on the base.
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundations",
        ("types", "moved", "configs", "oracle", "stats", "testing", "host"),
    ),
    ("functions and models", ("", "ehrlich", "rough_mt_fuji", "objective", "lm", "priors")),
    ("shared machinery", ("training", "metrics", "run", "ga", "ga.operators", "ga.loop")),
    ("the ask/tell base", ("optimizers.base", "optimizers.plugin")),
    ("optimizers", ("ga.optimizer", "llome", "lambo2", "optimizers.local_search")),
    ("the registry", ("optimizers", "optimizers.registry", "optimizers.contract")),
    ("tools", ("compare", "bench", "sweep", "compat")),
    ("the CLI", ("commands", "cli")),
]

Graph = dict[str, set[str]]


# ---------------------------------------------------------------------------------------------
# Reading the import graph
# ---------------------------------------------------------------------------------------------
def module_files(root: pathlib.Path, package: str = PACKAGE) -> dict[str, pathlib.Path]:
    """``{dotted module name: file}`` of every ``.py`` file under ``root`` (the package
    directory); a package's ``__init__.py`` is named after the package."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement at any depth (functions, classes, branches), except the bodies of
    ``if TYPE_CHECKING:`` blocks."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return found


def _containing_module(name: str, modules: dict[str, pathlib.Path]) -> str | None:
    """``name`` if it is a module of the package, else its longest dotted prefix that is."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def imported_modules(name: str, modules: dict[str, pathlib.Path]) -> set[str]:
    """The package modules that module ``name`` imports (see the module docstring)."""
    path = modules[name]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in _runtime_imports(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _containing_module(alias.name, modules)
                if target is not None:
                    targets.add(target)
            continue
        if node.level:
            base_parts = package.split(".")
            base_parts = base_parts[: len(base_parts) - (node.level - 1)]
            base = ".".join([*base_parts, *([node.module] if node.module else [])])
        else:
            base = node.module or ""
        if base != PACKAGE and not base.startswith(PACKAGE + "."):
            continue
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            target = submodule if submodule in modules else _containing_module(base, modules)
            if target is not None:
                targets.add(target)
    return targets


def import_graph(modules: dict[str, pathlib.Path]) -> Graph:
    """``{module: the package modules it imports}`` for every module."""
    return {name: imported_modules(name, modules) for name in modules}


# ---------------------------------------------------------------------------------------------
# Cycles
# ---------------------------------------------------------------------------------------------
def strongly_connected_components(graph: Graph) -> list[set[str]]:
    """Tarjan's algorithm (iterative); nodes only named as targets count as nodes too."""
    nodes = sorted(set(graph) | {t for targets in graph.values() for t in targets})
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[set[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                components.append(component)
    return components


def _shortest_path(graph: Graph, start: str, goal: str, allowed: set[str]) -> list[str]:
    """Breadth-first shortest path ``start .. goal`` through ``allowed`` nodes (it exists)."""
    previous: dict[str, str | None] = {start: None}
    queue = collections.deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            break
        for child in sorted(graph.get(node, ())):
            if child in allowed and child not in previous:
                previous[child] = node
                queue.append(child)
    path = [goal]
    while previous[path[-1]] is not None:
        path.append(previous[path[-1]])  # type: ignore[arg-type]
    return path[::-1]


def find_cycles(graph: Graph) -> list[list[str]]:
    """Import cycles as closed paths ``[a, b, ..., a]``: for every edge ``u -> v`` inside a
    strongly connected component, ``u`` followed by the shortest path back from ``v`` to ``u``
    (so every edge on a cycle appears in one), each cycle once, rotated to start at its smallest
    module. Empty for an acyclic graph."""
    cycles: set[tuple[str, ...]] = set()
    for component in strongly_connected_components(graph):
        for u in component:
            for v in graph.get(u, ()):
                if v not in component:
                    continue
                ring = [u, *_shortest_path(graph, v, u, component)][:-1] if v != u else [u]
                start = ring.index(min(ring))
                ring = ring[start:] + ring[:start]
                cycles.add((*ring, ring[0]))
    return [list(cycle) for cycle in sorted(cycles)]


def format_cycle(cycle: list[str]) -> str:
    return " -> ".join(cycle)


# ---------------------------------------------------------------------------------------------
# Floors
# ---------------------------------------------------------------------------------------------
def floor_of(module: str, floors: list[tuple[str, tuple[str, ...]]] = FLOORS) -> int | None:
    """The index in ``floors`` of ``module``'s longest matching prefix (``None``: no floor)."""
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(floors):
        for prefix in prefixes:
            full = f"{PACKAGE}.{prefix}" if prefix else PACKAGE
            matches = module == full or (prefix and module.startswith(full + "."))
            if matches and (best is None or len(full) > best[1]):
                best = (index, len(full))
    return None if best is None else best[0]


def arrows_back_up(graph: Graph, floors: list[tuple[str, tuple[str, ...]]] = FLOORS) -> list[str]:
    """Every import ``a -> b`` from a lower floor to a higher one, as ``"a (floor) -> b
    (floor)"``, sorted."""
    found = []
    for source, targets in graph.items():
        low = floor_of(source, floors)
        for target in targets:
            high = floor_of(target, floors)
            if low is not None and high is not None and high > low:
                found.append(f"{source} ({floors[low][0]}) -> {target} ({floors[high][0]})")
    return sorted(found)


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------
def test_no_module_over_the_line_limit() -> None:
    too_long = {}
    for name, path in module_files(PACKAGE_DIR).items():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            too_long[name] = lines
    report = "\n".join(f"  {name}: {lines} lines" for name, lines in sorted(too_long.items()))
    assert not too_long, f"modules over {MAX_LINES} lines (split them by concern):\n{report}"


def test_no_import_cycles() -> None:
    modules = module_files(PACKAGE_DIR)
    assert f"{PACKAGE}.ga" in modules and len(modules) > 50  # the walk found the package
    cycles = find_cycles(import_graph(modules))
    report = "\n".join(f"  {format_cycle(cycle)}" for cycle in cycles)
    assert not cycles, f"import cycles among {PACKAGE} modules (lazy imports included):\n{report}"


def test_at_most_twelve_top_level_modules() -> None:
    top = sorted(path.name for path in PACKAGE_DIR.glob("*.py"))
    assert "__init__.py" in top and "objective.py" in top  # the glob read the package
    assert len(top) <= MAX_TOP_LEVEL, f"{len(top)} top-level modules: {', '.join(top)}"


def test_every_module_has_a_floor_and_no_arrow_runs_back_up() -> None:
    modules = module_files(PACKAGE_DIR)
    assert [name for name in modules if floor_of(name) is None] == []
    graph = import_graph(modules)
    assert arrows_back_up(graph) == []


def test_an_arrow_back_up_is_caught() -> None:
    """Hand-made: the run directory importing the CLI, and the base importing an optimizer."""
    graph = {
        f"{PACKAGE}.run.rundir": {f"{PACKAGE}.commands.ga", f"{PACKAGE}.metrics"},
        f"{PACKAGE}.optimizers.base": {f"{PACKAGE}.llome.loop", f"{PACKAGE}.ga.loop"},
        f"{PACKAGE}.ga.optimizer": {f"{PACKAGE}.optimizers.base"},
    }
    assert floor_of(f"{PACKAGE}.ga") == floor_of(f"{PACKAGE}.ga.loop") == 2
    assert floor_of(f"{PACKAGE}.ga.optimizer") == 4 and floor_of(PACKAGE) == 1
    assert floor_of(f"{PACKAGE}.llome_extra") is None  # a prefix is a dotted name, not a string
    assert arrows_back_up(graph) == [
        f"{PACKAGE}.optimizers.base (the ask/tell base) -> {PACKAGE}.llome.loop (optimizers)",
        f"{PACKAGE}.run.rundir (shared machinery) -> {PACKAGE}.commands.ga (the CLI)",
    ]


def test_cycle_detector_finds_hand_made_cycles() -> None:
    acyclic = {"a": {"b", "c"}, "b": {"c"}, "c": set()}
    assert find_cycles(acyclic) == []
    graph = {"a": {"b"}, "b": {"c", "a"}, "c": {"a"}, "d": {"a", "d"}, "e": {"f"}, "f": {"e"}}
    assert find_cycles(graph) == [
        ["a", "b", "a"],
        ["a", "b", "c", "a"],
        ["d", "d"],
        ["e", "f", "e"],
    ]
    assert format_cycle(["a", "b", "a"]) == "a -> b -> a"


def test_lazy_and_relative_imports_are_edges(tmp_path: pathlib.Path) -> None:
    """A circle closed only by an import inside a function (or a relative one) is found; an
    import under ``if TYPE_CHECKING:`` and an absolute import of a submodule (no edge to its
    package) are not edges."""
    root = tmp_path / PACKAGE
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sub" / "__init__.py").write_text("from llome_jax.sub.b import name\n")
    (root / "a.py").write_text("from llome_jax.sub import b\n")
    (root / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from llome_jax import a\n"
        "def f():\n    from .. import a\n    return a\n"
        "name = 1\n"
    )
    (root / "c.py").write_text("import llome_jax.sub.b\nfrom llome_jax.sub import name\n")
    modules = module_files(root)
    graph = import_graph(modules)
    assert graph == {
        PACKAGE: set(),
        f"{PACKAGE}.a": {f"{PACKAGE}.sub.b"},
        f"{PACKAGE}.c": {f"{PACKAGE}.sub.b", f"{PACKAGE}.sub"},
        f"{PACKAGE}.sub": {f"{PACKAGE}.sub.b"},
        f"{PACKAGE}.sub.b": {f"{PACKAGE}.a"},
    }
    assert find_cycles(graph) == [[f"{PACKAGE}.a", f"{PACKAGE}.sub.b", f"{PACKAGE}.a"]]
