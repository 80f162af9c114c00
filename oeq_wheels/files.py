"""Where the cache lives, and content hashes of files."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path


def default_cache() -> Path:
    env = os.environ.get("OEQ_WHEELS_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "oeq-wheels"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
