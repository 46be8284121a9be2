"""The fuzzer's mutator: one input from a target's seeds and tokens (byte flips, inserts, deletes,
truncations, splices, length-field and number tweaks, dictionary tokens) or random bytes, and
:func:`input_for`, which makes input ``i`` of a target reproducible on its own.

Owns: :func:`mutate` (faults.rawfuzz uses it too) and :func:`input_for`.
Must not import: pyspark_s2s, the target modules of :mod:`faults.fuzz`, tests/.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from faults.fuzz.target import Target

__all__ = ["input_for", "mutate"]

_INTERESTING_INTS = (0, 1, -1, 2, 4, 8, 12, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 25000, 25001, 65535, 65536,
                     1 << 20, 0x7FFFFFFF, -0x80000000, -2)


def mutate(seeds: Sequence[bytes], tokens: Sequence[bytes], rng: random.Random, max_len: int) -> bytes:
    """One input: random bytes (1 in 10), or a seed with 1-5 mutations."""
    if rng.random() < 0.1 or not seeds:
        return rng.randbytes(rng.randint(0, 64 if rng.random() < 0.8 else 1024))
    data = bytearray(rng.choice(seeds))
    for _ in range(1 if rng.random() < 0.5 else rng.randint(2, 5)):
        n = len(data)
        op = rng.randrange(11)
        pos = rng.randint(0, n)
        if op == 0 and n:  # flip a bit
            i = rng.randrange(n)
            data[i] ^= 1 << rng.randrange(8)
        elif op == 1 and n:  # set a byte
            data[rng.randrange(n)] = rng.randrange(256)
        elif op == 2:  # insert random bytes
            data[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif op == 3 and n:  # delete a range
            end = min(n, pos + rng.randint(1, 16))
            del data[pos:end]
        elif op == 4:  # truncate
            del data[pos:]
        elif op == 5 and n:  # duplicate a range
            end = min(n, pos + rng.randint(1, 64))
            data[pos:pos] = data[pos:end]
        elif op == 6:  # splice with another seed
            other = rng.choice(seeds)
            cut = rng.randint(0, len(other))
            data = data[:pos] + other[cut:] if rng.random() < 0.5 else data[:pos] + other[:cut] + data[pos:]
        elif op in (7, 8) and n >= 4:  # overwrite a length field with an interesting number
            width = 4 if op == 7 or n < 8 else 8
            i = rng.randint(0, n - width)
            value = rng.choice(_INTERESTING_INTS)
            if rng.random() < 0.5:
                value = int.from_bytes(data[i : i + width], "big", signed=True) + rng.randint(-3, 3)
            lo, hi = -(1 << (8 * width - 1)), (1 << (8 * width - 1)) - 1
            data[i : i + width] = max(lo, min(hi, value)).to_bytes(width, "big", signed=True)
        elif op == 9 and tokens:  # a dictionary token
            tok = rng.choice(tokens)
            if rng.random() < 0.5:
                data[pos:pos] = tok
            else:
                data[pos : pos + len(tok)] = tok
        elif op == 10 and n:  # change an ASCII digit run's neighbourhood
            i = rng.randrange(n)
            data[i:i] = rng.choice((b"0", b"9", b"-", b"+", b" ", b".", b"e"))
    return bytes(data[:max_len])


#: each target's seeds, made once per process
_SEED_CACHE: dict[str, list[bytes]] = {}


def input_for(target: Target, seed: int, index: int) -> tuple[bytes, random.Random]:
    """Input ``index`` of ``target`` under ``seed`` and the rng the target run uses (reproducible)."""
    rng = random.Random(f"{seed}/{target.name}/{index}")
    seeds = _SEED_CACHE.get(target.name)
    if seeds is None:
        seeds = _SEED_CACHE[target.name] = target.seeds()
    return mutate(seeds, target.tokens, rng, target.max_len), rng
