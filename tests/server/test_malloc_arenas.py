"""``s2s serve`` caps glibc's malloc arenas (``limit_malloc_arenas``): a process whose threads
each get an arena of their own keeps what one frees away from the others, and grows.

Each case runs in a Python process of its own (an arena, once made, stays): 8 threads allocate
at once, and the arenas glibc made are counted in ``/proc/self/smaps`` (each non-main arena is a
64 MiB-aligned reservation of 64 MiB)."""

from __future__ import annotations

import os
import subprocess
import sys

_CHILD = r"""
import sys, threading
sys.path.insert(0, sys.argv[1])
from pyspark_s2s.server.cli import limit_malloc_arenas
capped = limit_malloc_arenas() if sys.argv[2] == "cap" else False
barrier = threading.Barrier(8)
def work():
    barrier.wait()
    keep = [bytes(4000 + i) for i in range(2000)]  # malloc'd (over pymalloc's 512 B), in this thread's arena
    barrier.wait()
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
HEAP = 64 << 20  # glibc's HEAP_MAX_SIZE on 64-bit: a non-main arena reserves this, aligned to it
ends = {}
starts = []
for line in open("/proc/self/maps"):
    lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
    ends[lo] = hi
    if lo % HEAP == 0 and line.split()[1] == "rw-p":
        starts.append(lo)
# the arena's used part (rw-p), then its reserved rest (---p) up to 64 MiB
arenas = sum(1 for lo in starts if ends[lo] - lo == HEAP or ends.get(ends[lo], 0) - lo == HEAP)
print(capped, arenas)
"""


def _arenas(mode: str) -> tuple[bool, int]:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", _CHILD, root, mode], env=env, capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    return out[0] == "True", int(out[1])


def test_the_server_caps_the_arenas_its_threads_make() -> None:
    capped, arenas = _arenas("cap")
    assert capped
    assert arenas <= 1  # the main arena (brk) and at most one more
    default, more = _arenas("default")
    assert not default and more >= 3, more  # each thread its own arena, without the cap


def test_an_operators_malloc_arena_max_is_left_alone() -> None:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = f"import sys; sys.path.insert(0, {root!r}); from pyspark_s2s.server.cli import limit_malloc_arenas; " \
           "print(limit_malloc_arenas())"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "MALLOC_ARENA_MAX": "4"},
                         capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert out == "False"
