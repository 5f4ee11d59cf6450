"""Numba's on-disk cache only notices edits to the file that holds a kernel, not to the kernels
it calls from other files. This guard hashes every source file of this package and drops the
package's numba cache when any of them changed, so a stale kernel can never run."""

from __future__ import annotations

import hashlib
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def drop_stale_numba_cache(package_dir: Path = _HERE) -> None:
    """Delete ``__pycache__/*.nbi|*.nbc`` of ``package_dir`` when its sources changed since the last import."""
    cache = package_dir / "__pycache__"
    digest = hashlib.sha256()
    for path in sorted(package_dir.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    stamp = cache / "numba_sources.sha256"
    current = digest.hexdigest()
    try:
        if stamp.read_text() == current:
            return
    except OSError:
        pass
    try:
        cache.mkdir(exist_ok=True)
        for pattern in ("*.nbi", "*.nbc"):
            for f in cache.glob(pattern):
                f.unlink(missing_ok=True)
        stamp.write_text(current)
    except OSError:
        pass  # a read-only install: numba then caches elsewhere or not at all
