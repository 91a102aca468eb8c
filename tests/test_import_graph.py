"""The module graph of ``attnreg`` has no cycle, and no study takes an untyped config.

Every module under ``src/attnreg`` is parsed with :mod:`ast`; every ``import`` statement counts,
wherever it sits (top level, inside a function, under ``if TYPE_CHECKING``), absolute or
relative. ``from package import name`` is an edge to ``package.name`` when that is a module of
the project, else to ``package``. Cycles are found with Tarjan's strongly-connected components.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "attnreg"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of the dotted ``name`` that is a project module, if any."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        candidate = ".".join(parts[:i])
        if candidate in modules:
            return candidate
    return None


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``module`` imports (every import statement in the file)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _resolve(alias.name, modules)
                if target is not None:
                    out.add(target)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if not is_package:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            for alias in node.names:
                target = _resolve(f"{prefix}.{alias.name}", modules)
                if target is not None:
                    out.add(target)
    out.discard(module)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly-connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_graph_sees_function_level_imports() -> None:
    graph = _graph()
    # function-level imports: the CLI registers each study's command inside a function, and
    # the runners import their figures (matplotlib) only when they draw them
    assert "attnreg.studies.command" in graph["attnreg.cli_commands"]
    assert "attnreg.studies.icl.figures" in graph["attnreg.studies.icl.run"]
    assert "attnreg.studies.icl.config" in graph["attnreg.studies.icl.run"]


def test_relative_imports_are_resolved(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        pkg / "__init__.py": "from . import a\n",
        pkg / "a.py": "def f():\n    from .sub import b\n",
        pkg / "sub" / "__init__.py": "",
        pkg / "sub" / "b.py": "from ..a import f\nfrom .. import a\n",
    }
    for path, text in files.items():
        path.write_text(text)
    modules = {
        "pkg": pkg / "__init__.py",
        "pkg.a": pkg / "a.py",
        "pkg.sub": pkg / "sub" / "__init__.py",
        "pkg.sub.b": pkg / "sub" / "b.py",
    }
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert graph == {
        "pkg": {"pkg.a"},
        "pkg.a": {"pkg.sub.b"},
        "pkg.sub": set(),
        "pkg.sub.b": {"pkg.a"},
    }
    assert _cycles(graph) == [["pkg.a", "pkg.sub.b"]]


def test_no_import_cycle() -> None:
    cycles = _cycles(_graph())
    assert cycles == [], "import cycles in src/attnreg:\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def _is_any(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return False
    if isinstance(annotation, ast.Name):
        return annotation.id == "Any"
    if isinstance(annotation, ast.Attribute):
        return annotation.attr == "Any"
    if isinstance(annotation, ast.BinOp):  # Any | None
        return _is_any(annotation.left) or _is_any(annotation.right)
    return False


def test_no_study_takes_an_any_config() -> None:
    offenders = []
    for path in sorted((PACKAGE / "studies").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args
                for arg in args.posonlyargs + args.args + args.kwonlyargs:
                    if arg.arg in ("config", "cfg") and _is_any(arg.annotation):
                        offenders.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name}")
    assert offenders == [], "config parameters typed Any:\n" + "\n".join(offenders)


_LOADED = """
import importlib, json, sys
importlib.import_module({module!r})
print(json.dumps(sorted(sys.modules)))
"""

# What a study's config (and its package's ``__init__``, the registry) must not pull in: the
# training loop, matplotlib, scikit-learn, the figure writer and any study's runner.
HEAVY = ("attnreg.training", "matplotlib", "sklearn", "attnreg.output", "torch.optim")


def _loaded(module: str) -> set[str]:
    """The modules in ``sys.modules`` after importing ``module`` in a fresh interpreter."""
    import json
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", _LOADED.format(module=module)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return set(json.loads(proc.stdout))


def _study_configs() -> list[str]:
    return sorted(_module_name(p) for p in (PACKAGE / "studies").glob("*/config.py"))


def test_every_study_has_a_config_module() -> None:
    assert _study_configs() == [
        f"attnreg.studies.{name}.config"
        for name in ("capacity", "compare", "depth", "icl", "layers", "verify")
    ]


def test_study_configs_and_the_registry_import_nothing_heavy() -> None:
    """A config module is a leaf in fact, not only per file: importing it (which runs its
    package's ``__init__``) or the whole registry loads no training loop, no matplotlib and no
    runner. ``import torch`` itself loads ``torch.optim`` (torch 2.x); that much is allowed,
    nothing beyond it. The registry imports every study's config (asserted), so what it loads
    is a superset of what any one config loads: one fresh interpreter checks them all."""
    by_torch = _loaded("torch")
    loaded = _loaded("attnreg.studies.registry")
    assert set(_study_configs()) <= loaded
    heavy = sorted(
        {
            name if name.startswith("attnreg.") else name.split(".")[0]
            for name in loaded - by_torch
            if name.split(".")[0] in ("matplotlib", "sklearn")
            or name in HEAVY
            or (name.startswith("attnreg.studies.") and name.endswith(".run"))
        }
    )
    assert heavy == [], f"importing the registry loads {heavy}"
    assert "attnreg.training" not in loaded and "matplotlib" not in loaded
