"""The in-container SDK keeps torch optional: importing it, in a fresh interpreter, imports no torch."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_sdk_and_its_torch_helper_never_imports_torch() -> None:
    modules = "aisched.workload, aisched.workload.torch, aisched.workload.distributed"
    probe = f"import sys, {modules}; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "False"
