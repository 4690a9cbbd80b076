"""The layering the project keeps: the SDK (trialog/) stands below every service, its
modules import each other without cycles, and a service folder holds that service
alone (only services/cli.py, which registers the services' commands, sees them all)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module_name(path: Path) -> str:
    """The import name: services/ at the top of the repository installs as trialog.services."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[0] == "services":
        parts = ("trialog", *parts)
    return ".".join(parts).removesuffix(".__init__")


def _runtime_nodes(tree: ast.AST):
    """Every node, except those under ``if TYPE_CHECKING:`` (never imported at run time)."""
    pending = [tree]
    while pending:
        node = pending.pop()
        yield node
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            pending.extend(node.orelse)
            continue
        pending.extend(ast.iter_child_nodes(node))


def _imports(path: Path) -> set[str]:
    """Every module a file imports at run time, at the top or inside functions, including
    names loaded by ``importlib.import_module("...")`` with a literal argument."""
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__"):
                found.add(node.args[0].value)
    return found


def _package(top: str) -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in sorted((ROOT / top).rglob("*.py"))}


def test_the_sdk_never_imports_a_service():
    offenders = {m: sorted(i for i in deps if i == "trialog.services" or i.startswith("trialog.services.")) for m, deps in _package("trialog").items()}
    offenders = {m: deps for m, deps in offenders.items() if deps}
    assert not offenders, f"trialog/ must not import services/ (register commands through the entry point instead): {offenders}"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
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

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_sdk_modules_import_each_other_without_cycles():
    imports = _package("trialog")
    graph = {m: {d for d in deps if d in imports and d != m} for m, deps in imports.items()}
    assert not _cycles(graph), f"import cycles in trialog/ (move what both need into a module below them): {_cycles(graph)}"


def test_a_service_folder_imports_no_other_service():
    for module, deps in _package("services").items():
        parts = module.split(".")
        if len(parts) < 4:  # services/cli.py registers every service's commands
            continue
        own = ".".join(parts[:3])
        foreign = sorted(d for d in deps if d.startswith("trialog.services.") and not (d == own or d.startswith(own + ".")))
        assert not foreign, f"{module} imports another service: {foreign} (what two services share belongs in trialog/)"


def test_service_commands_come_through_the_entry_point():
    """``trialog serve`` lists the services although trialog/ never names them."""
    out = subprocess.run([sys.executable, "-m", "trialog.cli", "serve", "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    for service in ("orchestrator", "environment", "actors", "logger"):
        assert service in out.stdout, f"`trialog serve {service}` missing: is the package installed (pip install -e .)?\n{out.stdout}"
