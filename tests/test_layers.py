"""The layers of `operator/lockgate/` hold: no part imports a part of its own layer or of a
layer above it, at the top of a module or inside a function (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "operator" / "lockgate"

# The parts of lockgate, lowest layer first. A part (a subpackage, or a top-level module)
# may import itself and any part of a lower layer; never a part of its own layer (parts
# side by side stay independent) nor of a higher one. A new part goes into this table.
LAYERS: list[tuple[str, set[str]]] = [
    (
        "foundation: import nothing of ours",
        {
            "models",
            "bigints",
            "logs",
            "signing",
            "timestamps",
            "supervisor",
            "client",
            "clientconfig",
            "output",
            "hfcache",
        },
    ),
    ("Redis store; the worker SDK (user containers)", {"store", "worker", "workerenv"}),
    ("settings of the server processes", {"settings", "apikeys"}),
    ("job API and worker API", {"gateway"}),
    ("scaling decisions; management API over ControlPlane", {"scaling", "manage"}),
    ("adapters: Kubernetes, dev mode's local processes", {"kube", "dev"}),
    ("composition roots, one per process", {"apps"}),
    ("the CLI's daily-work commands over HTTP", {"commands"}),
    ("the `lockgate` command", {"cli"}),
]
LAYER = {part: rank for rank, (_, parts) in enumerate(LAYERS) for part in parts}

# Third-party packages that only some parts may import.
ONLY_IN = {"kopf": {"kube", "apps"}, "kubernetes": {"kube", "apps"}}


def module_name(path: Path) -> str:
    """`operator/lockgate/gateway/app.py` -> `lockgate.gateway.app` (packages: no `__init__`)."""
    parts = ("lockgate", *path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(source: str, module: str, *, is_package: bool = False) -> set[str]:
    """Every module name `source` imports, anywhere in it (function bodies and
    `TYPE_CHECKING` blocks too), relative imports made absolute; `from a import b` gives
    `a.b`, which is `b` itself when b is a module and harmless when it is a name."""
    package = module if is_package else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            names |= {f"{base}.{alias.name}" for alias in node.names}
    return names


def part_of(name: str) -> str | None:
    """The part a `lockgate.…` module (or name in it) belongs to; None for other packages."""
    pieces = name.split(".")
    return pieces[1] if pieces[0] == "lockgate" and len(pieces) > 1 else None


def modules() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


@pytest.mark.parametrize(
    ("source", "module", "package", "expected"),
    [
        ("import lockgate.kube.cluster", "lockgate.manage.x", False, {"lockgate.kube.cluster"}),
        ("from lockgate import apikeys", "lockgate.manage.x", False, {"lockgate.apikeys"}),
        ("def f():\n    from lockgate.gateway.main import main", "lockgate.supervisor", False,
         {"lockgate.gateway.main.main"}),
        ("from . import app", "lockgate.gateway", True, {"lockgate.gateway.app"}),
        ("from .state import GATEWAY", "lockgate.gateway.app", False,
         {"lockgate.gateway.state.GATEWAY"}),
        ("from ..kube import crds", "lockgate.manage.kube", False, {"lockgate.kube.crds"}),
        ("if TYPE_CHECKING:\n    import kopf", "lockgate.scaling.x", False, {"kopf"}),
    ],
)  # fmt: skip
def test_imports_are_found_wherever_they_are_written(
    source: str, module: str, package: bool, expected: set[str]
) -> None:
    assert imported(source, module, is_package=package) == expected


def test_every_part_has_a_layer() -> None:
    parts = {part_of(module_name(path)) for path in modules()} - {None}
    assert parts - LAYER.keys() == set(), "add the new part to LAYERS"
    assert sum(len(p) for _, p in LAYERS) == len(LAYER), "a part is in two layers"


def violations(module: str, source: str, *, is_package: bool = False) -> list[str]:
    """What `module` (with this `source`) imports against the layers, one line each."""
    part = part_of(module)
    found = []
    for name in sorted(imported(source, module, is_package=is_package)):
        other, top = part_of(name), name.split(".")[0]
        if other is not None and other != part and LAYER[other] >= LAYER[part]:
            side = "beside" if LAYER[other] == LAYER[part] else "above"
            found.append(f"{module} imports {name}: {other} is {side} {part}")
        elif top in ONLY_IN and part not in ONLY_IN[top]:
            found.append(f"{module} imports {top}: only {sorted(ONLY_IN[top])} may")
    return found


@pytest.mark.parametrize(
    ("module", "source", "allowed"),
    [
        ("lockgate.apps.dev", "from lockgate.dev.launch import Launch", True),
        ("lockgate.kube.scaler", "from lockgate.kube.cluster import Cluster", True),
        ("lockgate.kube.scaler", "from lockgate.scaling.pool import WorkerPool", True),
        ("lockgate.supervisor", "def main():\n    from lockgate.gateway.main import main", False),
        ("lockgate.scaling.x", "from lockgate.kube.cluster import Cluster", False),
        ("lockgate.manage.x", "import lockgate.dev.workers", False),
        ("lockgate.kube.x", "from lockgate.dev import workers", False),  # side by side
        ("lockgate.worker.client", "from lockgate.store import keys", False),
        ("lockgate.gateway.x", "import lockgate.apps.gateway", False),
        ("lockgate.kube.cluster", "import kubernetes.client", True),
        ("lockgate.scaling.x", "import kopf", False),
    ],
)
def test_a_part_imports_only_from_the_layers_below(module: str, source: str, allowed: bool) -> None:
    assert (violations(module, source) == []) == allowed


def test_no_part_imports_one_beside_or_above_it() -> None:
    found = []
    for path in modules():
        module, package = module_name(path), path.stem == "__init__"
        found += violations(module, path.read_text(), is_package=package)
    assert found == []
