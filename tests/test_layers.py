"""The product's modules import one way: no circle of imports inside the product packages (import-linter holds
the layers between rooms; this holds the modules inside them), type-checking imports counted too."""
from __future__ import annotations

PACKAGES = ("schemas", "headsearch", "indexer", "actions", "trainer", "bench", "serve", "cli")


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
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

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_inside_the_product():
    import sys

    import grimp

    sys.setrecursionlimit(10_000)
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=False)
    edges = {m: {i for i in graph.find_modules_directly_imported_by(m) if i.split(".")[0] in PACKAGES} for m in graph.modules}
    # a package's __init__ that re-exports its modules is not a circle with them: count module-to-module imports only
    edges = {m: {i for i in targets if not m.startswith(i + ".")} for m, targets in edges.items()}
    assert circles(edges) == []


def test_the_circle_finder_finds_circles():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
