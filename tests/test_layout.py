"""The package's folders tell the README's story, and imports run one way, down.

Two things a reader of `ls` relies on, held here so they cannot go stale: docs/design.md's map
of the tree has a line for every folder and module and no line for one that is gone; and each
folder imports only what the rule below allows, with no import cycle between modules anywhere
(lazy imports inside functions and imports for types count: a cycle is a cycle to a reader).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DESIGN = REPO / "docs" / "design.md"
PACKAGES = ("devicemanager", "vendors")

# Which part of the code may import which. A part is a folder of `devicemanager/` (`node`,
# `grants`, …), a top-level module of it (`model`, `backend`, `cli`, `__main__`), the package's
# own `__init__` (`devicemanager`, for `__version__`), or `vendors`. The pure core is `model`,
# `node`, `grants`, `figures`, `round`: each step imports only the steps before it, never a
# world, a vendor or the shell.
CORE = ("figure_table", "model", "node", "grants", "figures", "round")
ALLOWED: dict[str, set[str]] = {
    "devicemanager": set(),
    "figure_table": set(),
    "model": {"figure_table"},
    "node": {"model"},
    "grants": {"model", "node"},
    "figures": {"model", "node", "grants"},
    "round": {"model", "node", "grants", "figures"},
    "backend": {"model"},
    "vendors": {"model", "backend"},
    "deadline": set(),
    "report": {"model", "deadline"},
    "crosscheck": {"model", "backend", "figures", "serve"},
    "kube": {"model", "node", "grants", "figures"},
    "serve": {"devicemanager", "model", "node", "grants", "figures", "kube", "deadline"},
    "agent": {
        "devicemanager",
        "model",
        "backend",
        "node",
        "grants",
        "figures",
        "round",
        "kube",
        "serve",
    },
    "__main__": {"cli"},
}
ALLOWED["cli"] = ALLOWED["agent"] | {"agent", "report", "crosscheck"}
NEVER_FROM_CORE = {
    "kube",
    "serve",
    "report",
    "crosscheck",
    "vendors",
    "agent",
    "cli",
    "__main__",
    "backend",
    "deadline",
}


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module of ours that `name` imports, anywhere in its text."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.append(full if full in known else base)
        for target in targets:
            while target not in known and "." in target:
                target = target.rpartition(".")[0]
            if target in known and target != name:
                out.add(target)
    return out


def part(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "vendors":
        return "vendors"
    return parts[1] if len(parts) > 1 else "devicemanager"


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: imported(name, path, known) for name, path in found.items()}


def test_every_part_is_in_the_rule() -> None:
    assert {part(m) for m in graph()} == set(ALLOWED)


def test_each_part_imports_only_what_the_rule_allows() -> None:
    broken = sorted(
        f"{module} imports {target}"
        for module, targets in graph().items()
        for target in targets
        if part(target) != part(module) and part(target) not in ALLOWED[part(module)]
    )
    assert broken == []


def test_the_core_imports_no_world_no_vendor_and_not_the_shell() -> None:
    for core in CORE:
        assert not ALLOWED[core] & NEVER_FROM_CORE, core


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_between_modules() -> None:
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    # The check above can fail: a two-module and a three-module cycle are both found.
    edges = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert cycles(edges) == [["a", "b"], ["c", "d", "e"]]


def test_a_lazy_import_and_an_import_for_types_count(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from devicemanager.figures.slices import Lookup\n"
        "def f():\n    from devicemanager.node import cgroup\n"
    )
    known = {"devicemanager.model", "devicemanager.figures.slices", "devicemanager.node.cgroup"}
    got = imported("devicemanager.model", source, known)
    assert got == {"devicemanager.figures.slices", "devicemanager.node.cgroup"}


# -- the map in docs/design.md -------------------------------------------------------------------

LINE = re.compile(r"^( *)(\S+)(?:\s{2,}(.*))?$")


def mapped() -> Iterator[tuple[str, str]]:
    """(path, description) for each line of the map: the code block of the Layout section."""
    text = DESIGN.read_text()
    section = text[text.index("## Layout\n") :]
    block = section[section.index("```\n") + 4 :]
    block = block[: block.index("```\n")]
    parents: list[str] = []
    for line in block.splitlines():
        m = LINE.match(line)
        assert m, f"not a map line: {line!r}"
        depth = len(m.group(1)) // 2
        assert len(m.group(1)) % 2 == 0 and depth <= len(parents), f"misindented: {line!r}"
        parents = parents[:depth]
        path = "".join(parents) + m.group(2)
        if path.endswith("/"):
            parents.append(m.group(2))
        yield path, (m.group(3) or "").strip()


def tree() -> set[str]:
    """Every folder and module of the two packages, and the repository's top-level folders."""
    out: set[str] = set()
    for package in PACKAGES:
        root = REPO / package
        out.add(f"{package}/")
        for path in root.rglob("*"):
            rel = path.relative_to(REPO)
            if "__pycache__" in rel.parts or "proto" in rel.parts[:-1]:
                continue
            if path.is_dir() and (path / "__init__.py").exists():
                out.add(f"{rel}/")
            elif path.suffix == ".py" and path.name != "__init__.py":
                out.add(str(rel))
    for folder in ("tests", "fixtures", "deploy", "docs", "scripts", "bench"):
        out.add(f"{folder}/")
    return out


def test_the_map_names_every_folder_and_module_once() -> None:
    paths = [p for p, _ in mapped()]
    assert len(paths) == len(set(paths)), "a path is on two lines"
    assert set(paths) - tree() == set(), "lines for files that are gone"
    assert tree() - set(paths) == set(), "files with no line in docs/design.md's map"


def test_every_line_of_the_map_says_what_it_is() -> None:
    assert [p for p, what in mapped() if not what] == []


@pytest.mark.parametrize("step", ["node", "grants", "figures", "serve"])
def test_the_readme_story_is_the_folders(step: str) -> None:
    # The README's one story (pods, grants, figures, serving) is what `ls devicemanager` shows.
    assert (REPO / "devicemanager" / step / "__init__.py").is_file()
    assert f"`{step}/`" in (REPO / "README.md").read_text()
