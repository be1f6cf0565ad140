"""The C heap of this process, as glibc's allocator counts it (`mallinfo2`, glibc 2.33+).

Resident memory alone cannot tell a leak from an allocator that keeps freed memory for later: a
learner's update allocates and frees tens of MB of buffers, and glibc may keep a freed run of them
in its arenas. `in_use` is what live allocations hold (arena chunks in use plus blocks mapped on
their own); `free` is what the arenas hold unused. Python's small objects live in pymalloc's own
mapped arenas and count in neither: their growth shows in resident memory only."""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import NamedTuple


class _Mallinfo2(ctypes.Structure):  # glibc's struct mallinfo2: every field a size_t
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",  # bytes in the main and thread arenas (sbrk and mmap'd heaps)
            "ordblks",  # free chunks
            "smblks",  # free fastbin chunks
            "hblks",  # blocks mapped on their own
            "hblkhd",  # bytes in blocks mapped on their own
            "usmblks",  # always 0
            "fsmblks",  # bytes in free fastbin chunks
            "uordblks",  # bytes in chunks in use
            "fordblks",  # bytes in free chunks
            "keepcost",  # top-most releasable bytes
        )
    ]


class Heap(NamedTuple):
    in_use: int  # bytes live allocations hold: arena chunks in use + blocks mapped on their own
    free: int  # bytes free in the arenas, kept by the allocator


def _mallinfo2() -> ctypes._CFuncPtr | None:
    name = ctypes.util.find_library("c")
    try:
        fn = ctypes.CDLL(name).mallinfo2
    except (OSError, AttributeError, TypeError):  # not glibc, or glibc before 2.33
        return None
    fn.restype, fn.argtypes = _Mallinfo2, []
    return fn


_MALLINFO2 = _mallinfo2()


def heap() -> Heap | None:
    """This process's C heap now; None where the C library has no mallinfo2."""
    if _MALLINFO2 is None:
        return None
    info = _MALLINFO2()
    return Heap(in_use=info.uordblks + info.hblkhd, free=info.fordblks)
