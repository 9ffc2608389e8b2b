"""Drop the CUDA files a CPU-only torch never loads, from the image being built (build step only).

PyPI's torch for Linux links its CUDA build against NVIDIA's wheels: `import torch` loads
libtorch_cuda.so and with it a dozen CUDA libraries, GPU or not, so they must be present;
but cuDNN's engines, cuSOLVER, nvrtc's builtins, headers and static archives are opened
only when a GPU runs something. This keeps every shared object that the dynamic loader
resolves for torch's own libraries (ldd: the transitive DT_NEEDED set) and removes the
other ELF files, headers and archives under site-packages/nvidia. The build then imports
torch and runs a gloo collective, so a library removed wrongly fails the build, not a job.

    python3 slim_torch.py SITE_PACKAGES
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ELF_MAGIC = b"\x7fELF"


def loaded_at_import(site: Path) -> set[Path]:
    """Every library under SITE that the loader resolves for torch's extension module and libraries."""
    roots = [*site.glob("torch/_C*.so"), *(site / "torch" / "lib").glob("*.so*")]
    # Loaded only on demand by a GPU's linear algebra and nvrtc, never by `import torch`.
    roots = [p for p in roots if p.name not in {"libtorch_cuda_linalg.so", "libcaffe2_nvrtc.so"}]
    needed: set[Path] = set()
    for root in roots:
        listing = subprocess.run(["ldd", str(root)], capture_output=True, text=True, check=True).stdout
        for line in listing.splitlines():
            _, arrow, rest = line.partition("=>")
            path = rest.split("(")[0].strip() if arrow else ""
            if path.startswith("/"):
                needed.add(Path(path).resolve())
    return needed


def is_elf(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == ELF_MAGIC


def main(site: Path) -> None:
    needed = loaded_at_import(site)
    removed = 0
    for path in sorted((site / "nvidia").rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        generated = path.suffix in {".a", ".h", ".hpp", ".cuh"} or "include" in path.parts
        if generated or (is_elf(path) and path.resolve() not in needed):
            removed += path.stat().st_size
            path.unlink()
    kept = sum(p.stat().st_size for p in needed if site / "nvidia" in p.parents)
    print(f"slim_torch: kept {kept >> 20} MiB of CUDA libraries torch loads, removed {removed >> 20} MiB")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
