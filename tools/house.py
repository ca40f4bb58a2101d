"""The house's shape, as a review reads it: lens_rl's folders, its files over 400 lines, its functions over 60
lines, and per folder the blocks radon ranks C or worse (cyclomatic complexity over 10).

Run:  python tools/house.py [CHECKOUT]    (radon: ``pip install radon``)
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

FILE_LINES = 400
FUNCTION_LINES = 60


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else Path(__file__).resolve().parents[1])
    package = root / "lens_rl"
    sources = sorted(package.rglob("*.py"))
    folders = sorted({str(p.parent.relative_to(root)) for p in sources})
    print("== folders\n " + " ".join(folders))
    print(f"== files over {FILE_LINES} lines")
    for path in sources:
        lines = len(path.read_text().splitlines())
        if lines > FILE_LINES:
            print(f"  {lines:5d} {path.relative_to(root)}")
    print(f"== functions over {FUNCTION_LINES} lines")
    long = 0
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > FUNCTION_LINES:
                    long += 1
                    print(f"  {path.relative_to(root)}:{node.lineno} {node.name} {size}")
    print(f"  total {long}")
    print("== radon cc: blocks ranked C or worse, per folder")
    ranked = subprocess.run(
        [sys.executable, "-m", "radon", "cc", "-n", "C", "-j", str(package)], capture_output=True, text=True
    )
    if ranked.returncode != 0:
        print("  radon is not installed here: pip install radon")
        return 1
    per_folder: Counter[str] = Counter()
    for path, blocks in json.loads(ranked.stdout).items():
        per_folder[str(Path(path).resolve().parent.relative_to(root.resolve()))] += len(blocks)
    for folder in sorted(per_folder):
        print(f"  {folder}: {per_folder[folder]}")
    print(f"  total {sum(per_folder.values())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
