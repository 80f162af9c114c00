"""What a disk error does to a cached file, for the cache-integrity tests of both tiers."""
import os
from pathlib import Path


def flip_byte_keep_mtime(path: Path, offset: int = 100) -> None:
    """What a disk error or a careless edit does: one byte changed, the mtime put back."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[offset % len(data)] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_size == st.st_size
