"""Memory planning: one arena for every intermediate buffer and every kernel's scratch, sized from
their lifetimes in plan order -- slots whose lifetimes (closed intervals of group indices) do not
overlap may share memory. Offsets are 64-byte aligned (a cache line; the widest vector load).

>>> layout([Slot(0, 100, 0, 1), Slot(1, 100, 2, 3), Slot(2, 10, 1, 2)])
(448, [0, 0, 256])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

ALIGN = 64
#: Bytes after every slot that a kernel may read (never use): the register-blocked conv tile reads
#: a whole last chunk of positions straight from its input (32 floats).
SLACK = 128


@dataclass(frozen=True)
class Slot:
    """A block of memory the program needs from group ``first`` to group ``last`` (inclusive)."""
    key: int
    nbytes: int
    first: int
    last: int


def _round(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def layout(slots: Sequence[Slot]) -> tuple[int, list[int]]:
    """(arena bytes, offset of each slot): largest slots first, each at the lowest aligned offset
    where it overlaps in memory no placed slot whose lifetime overlaps its own."""
    offsets = [0] * len(slots)
    placed: list[tuple[int, int, Slot]] = []  # (start, end, slot)
    for i in sorted(range(len(slots)), key=lambda i: (-slots[i].nbytes, slots[i].first, i)):
        s = slots[i]
        size = _round(s.nbytes + SLACK)
        busy = sorted((a, b) for a, b, o in placed if o.first <= s.last and s.first <= o.last)
        off = 0
        for a, b in busy:
            if off + size <= a:
                break
            off = max(off, b)
        offsets[i] = off
        placed.append((off, off + size, s))
    return max((b for _, b, _ in placed), default=0), offsets
