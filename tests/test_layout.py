"""The house's floors, kept on the import graph: each folder imports only what the SPEC's Layout table lets it.

Every ``import`` and ``from ... import`` of every module is read (function-level ones too; those under
``if TYPE_CHECKING:`` are annotations, not imports, and are left out).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lens_rl"

#: room -> the modules of lens_rl (dotted, under lens_rl.) that belong to it, by prefix or name.
ROOMS = {
    "face": ("__init__", "cli", "__main__", "demo", "_version"),
    "setup": ("config", "identity", "lifecycle"),
    "vocabulary": ("buckets", "_attributes", "_errors"),
    "runtime": ("_runtime", "propagation"),
    "record": ("record",),
    "export": ("export",),
    "store": ("store",),
    "offline": ("offline",),  # the face: offline/__init__ (its sub-floors are rooms of their own)
    "offline.read": ("offline.read",),
    "offline.rollup": ("offline.rollup",),
    "offline.run": ("offline.run",),
    "offline.show": ("offline.show",),
    "frameworks": ("frameworks",),
    "devices": ("devices",),
    "integrations": ("integrations",),
    "testing": ("testing",),
}
#: room -> the rooms it may import (its own always; ``_version``, a constant, anyone).
ALLOWED = {
    "face": set(ROOMS),
    "setup": {"vocabulary", "runtime", "record", "export", "store", "devices"},
    "vocabulary": set(),
    "runtime": {"vocabulary"},
    "record": {"vocabulary", "runtime"},
    "export": {"vocabulary", "runtime", "store"},
    "store": set(),
    "offline": {"store", "vocabulary", "offline.read", "offline.rollup", "offline.run", "offline.show"},
    "offline.read": {"store", "vocabulary"},
    "offline.rollup": {"offline.read.parts", "offline.read.intervals", "vocabulary"},  # (the parts, not the reading)
    "offline.run": {"offline.read", "offline.rollup", "store", "vocabulary"},
    "offline.show": {"offline.run", "offline.rollup.schema", "vocabulary"},
    "frameworks": {"vocabulary", "runtime", "record", "setup"},
    # the GPU sampler and the profiler windows: started by the lifecycle (setup), below it; they get their
    # settings from the config object handed in, never by importing setup
    "devices": {"vocabulary", "runtime", "record", "export", "store"},
    "integrations": {room for room in ROOMS if not room.startswith("offline")},
    "testing": set(ROOMS),
}


#: (module, module it imports) the Layout table forbids and that must stay a while, each with why: none now
#: (issue 38 moved show/'s reads of the store and its uses of read/ into run/ and rollup/).
NOT_YET: set[tuple[str, str]] = set()


def room_of(module: str) -> str:
    """The room of ``lens_rl.<module>`` (the longest dotted prefix named in ROOMS decides: ``offline.read.x``
    is in ``offline.read``, ``offline`` itself the offline face)."""
    parts = module.split(".")
    for cut in range(len(parts), 0, -1):
        head = ".".join(parts[:cut])
        for room, names in ROOMS.items():
            if head in names:
                return room
    raise AssertionError(f"lens_rl.{module} belongs to no room of the Layout table")


def allowed(module: str, target: str) -> bool:
    """May ``module`` import ``target`` (both dotted under lens_rl)? Its own room, _version, a room the table
    allows, or (a room allowed by module, such as ``offline.rollup.schema``) that module and what is under it."""
    room, other = room_of(module), room_of(target)
    if other == room or target == "_version" or other in ALLOWED[room]:
        return True
    return any(target == name or target.startswith(name + ".") for name in ALLOWED[room] if name not in ROOMS)


def modules() -> dict[str, Path]:
    """lens_rl's modules, dotted under lens_rl (a package as its name; the face as __init__)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _in_type_checking(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imports(path: Path, module: str) -> set[str]:
    """Every module ``path`` imports: absolute names (relative imports resolved against ``module``)."""
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)) or _in_type_checking(node, parents):
            continue
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = ("lens_rl." + package).rstrip(".").split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            out.add(base)
            for alias in node.names:  # ``from lens_rl import x``: x may be a module of ours
                out.add(f"{base}.{alias.name}")
    return out


def graph() -> dict[str, set[str]]:
    """lens_rl module -> the lens_rl modules it imports (dotted under lens_rl; the face as __init__)."""
    mods = modules()
    out = {}
    for module, path in mods.items():
        mine = set()
        for name in imports(path, module if module != "__init__" else ""):
            if name == "lens_rl":
                mine.add("__init__")
            elif name.startswith("lens_rl."):
                dotted = name[len("lens_rl.") :]
                while dotted and dotted not in mods:
                    dotted = dotted.rpartition(".")[0]
                if dotted:
                    mine.add(dotted)
        out[module] = mine - {module}
    return out


def test_every_module_stands_in_a_room_and_imports_only_what_its_room_may() -> None:
    """The Layout table, arrow by arrow: a room imports its own, _version, and the rooms the table allows."""
    broken = []
    for module, targets in graph().items():
        for target in targets:
            if not allowed(module, target) and (module, target) not in NOT_YET:
                broken.append(f"lens_rl.{module} ({room_of(module)}) imports lens_rl.{target} ({room_of(target)})")
    assert broken == []


def test_the_offline_sub_floors_waivers_are_still_needed() -> None:
    """Every import NOT_YET waives is still made and still forbidden (a fixed one leaves the list)."""
    g = graph()
    stale = [pair for pair in sorted(NOT_YET) if pair[1] not in g.get(pair[0], ()) or allowed(*pair)]
    assert stale == []


def test_the_rollup_is_pure() -> None:
    """offline/rollup/ opens no file, starts no process, touches no cache: it imports none of the modules that do."""
    io = ("os", "pathlib", "subprocess", "multiprocessing", "concurrent", "tempfile", "shutil", "pickle", "ray")
    found = []
    for module, path in modules().items():
        if room_of(module) == "offline.rollup":
            found += [f"lens_rl.{module}: {n}" for n in imports(path, module) if n.split(".")[0] in io]
    assert found == []


def test_nothing_imports_the_package_face_from_inside() -> None:
    """No module of lens_rl imports lens_rl/__init__ (its names are re-exports for users)."""
    assert [m for m, targets in graph().items() if "__init__" in targets] == []


def test_the_hot_path_never_touches_the_sdk_or_the_exporters() -> None:
    """record/ imports neither opentelemetry.sdk nor any exporter; offline/ never the runtime or the SDK side."""
    mods = modules()
    for module, path in mods.items():
        names = imports(path, module)
        if room_of(module) == "record":
            assert not [n for n in names if n.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))], module
        if room_of(module).startswith("offline"):
            assert not [n for n in names if n.startswith("lens_rl._runtime")], module


def test_private_opentelemetry_names_live_in_one_module() -> None:
    """Every import of a private OpenTelemetry name (a module or name starting with _) is in export/_sdk.py."""
    found = []
    for module, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("opentelemetry"):
                private = "._" in "." + node.module or any(a.name.startswith("_") for a in node.names)  # type: ignore[operator]
                if private and module != "export._sdk":
                    found.append(f"lens_rl.{module}: from {node.module} import {', '.join(a.name for a in node.names)}")
    assert found == []


def test_no_import_cycle() -> None:
    """The modules import each other in no loop (shared/tools/import_cycles.py finds none either)."""
    g = graph()
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, trail: list[str]) -> bool:
        state[node] = 1
        for nxt in sorted(g.get(node, ())):
            if state.get(nxt) == 1:
                cycle.extend([*trail, node, nxt])
                return True
            if state.get(nxt) is None and visit(nxt, [*trail, node]):
                return True
        state[node] = 2
        return False

    sys.setrecursionlimit(10_000)
    for node in sorted(g):
        if state.get(node) is None and visit(node, []):
            break
    assert cycle == []
