"""Which of the repository's files a benchmark's figures depend on: its module's import closure, and
what the modules in it run as processes or read as files.

`provenance()` stamps a results file with the commit it was produced at; a change committed since
then to any file the benchmark imports, directly or through others (`aisched.*`, `benchmarks.*`,
packages' `__init__` included), makes its figures stale. Imports are read from the source (`ast`),
not by importing: every import statement counts, `TYPE_CHECKING` ones and those inside functions too,
so the set errs on the side of calling a figure stale. A benchmark that starts the operator
(`aisched.testing.operator` runs `python -m aisched.cli`) measures the operator's closure too, and
one that starts the local cluster measures the scripts, presets and chart it is made from
(`RUNS`): no import leads there.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

from benchmarks.common import REPO_ROOT

_ROOTS = {"aisched": Path("operator/aisched"), "benchmarks": Path("benchmarks")}
RUNS: dict[str, tuple[str, ...]] = {
    "aisched.testing.operator": ("aisched.cli",),
    "aisched.testing.cluster": ("hack/cluster.sh", "hack/lib.sh", "hack/clusters", "hack/kwok", "helm/aisched"),
}
"""What a module runs without importing it: modules started as processes, and files (paths) it reads."""


def module_file(module: str, root: Path = REPO_ROOT) -> Path | None:
    """The repository file (relative to ROOT) that defines MODULE; None for a module not ours."""
    top, _, rest = module.partition(".")
    if top not in _ROOTS:
        return None
    base = _ROOTS[top].joinpath(*rest.split(".")) if rest else _ROOTS[top]
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if (root / candidate).is_file():
            return candidate
    return None


def _imported(path: Path, module: str, root: Path) -> set[str]:
    """The modules PATH (module MODULE) imports, relative imports resolved; a `from x import y` names both
    x and x.y, since y may be a submodule."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse((root / path).read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def measured_files(module: str, root: Path = REPO_ROOT) -> list[Path]:
    """Every repository file MODULE's import closure reads, relative to ROOT, sorted."""
    seen: dict[str, Path] = {}
    read: set[Path] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen or (path := module_file(name, root)) is None:
            continue
        seen[name] = path
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # a module's packages run first
        todo.extend(_imported(path, name, root))
        for ran in RUNS.get(name, ()):
            if "/" in ran:
                read.add(Path(ran))
            else:
                todo.append(ran)
    return sorted(set(seen.values()) | read)


def changed_since(commit: str, files: list[Path], root: Path = REPO_ROOT) -> list[str] | None:
    """Those of FILES that differ at HEAD from COMMIT; None when git does not know COMMIT (a shallow clone).

    Committed changes only: an edit under way does not fail the tests before it is committed, and the
    commit that makes a figure stale is the one that must rerun it (or say why not)."""
    asked = ["git", "cat-file", "-e", f"{commit}^{{commit}}"]
    known = subprocess.run(asked, cwd=root, capture_output=True, check=False)
    if known.returncode != 0:
        return None
    done = subprocess.run(
        ["git", "diff", "--name-only", commit, "HEAD", "--", *map(str, files)],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted(done.stdout.split())
