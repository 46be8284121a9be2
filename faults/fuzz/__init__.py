"""A seeded mutation fuzzer for every decoder and parser of pyspark-s2s (docs/reliability.md).

``python -m faults.fuzz --inputs 1000000 --seed N`` feeds each target input derived from valid
encodings of what it parses (byte flips, inserts, deletes, truncations, splices, length-field
and number tweaks, tokens such as deep JSON nesting or 5000-digit numbers) plus random bytes,
and checks one invariant per input: the target parses it, or raises the error its module
documents (an :class:`~pyspark_s2s.errors.S2SError` subclass, named per target), nothing
else. Each input must also finish within ``--deadline`` seconds (a watchdog reports a hang and
interrupts it) and the process's peak resident memory must stay within ``--max-rss-mb`` (512; the
decoders are run with small limits and also checked against their documented buffer bounds).

Every input is reproducible on its own: input ``i`` of target ``t`` comes from
``random.Random(f"{seed}/{t}/{i}")``; a violation prints the target, seed, index and the input
(hex, truncated); ``--target NAME --index I`` replays one. The exit status is 1 on a violation.

The modules, one job each:

* ``target``: the :class:`Target` record, the invariant's error and the input-shaping helpers;
* ``seeds``: seeds and token dictionaries more than one area starts from;
* ``protocol``, ``client``, ``server``, ``records``: the targets of each area of the package
  (``records`` are the ``--records`` targets);
* ``table``: every area's targets in one table;
* ``mutator``: :func:`mutate` and :func:`input_for`;
* ``runner``: :func:`run_fuzz`, :func:`run_atheris` and the command line (``__main__``).

Owns: the public names of the fuzzer (re-exported here: ``from faults.fuzz import mutate``).
Must not import: tests/, the fault harness (no server process is started: the server's request
parsers are called directly, on stub requests). Imports pyspark (through the Spark options
parser's package, when that target runs) and pyarrow (the client's Arrow receive path).
"""

from __future__ import annotations

from faults.fuzz.mutator import input_for, mutate
from faults.fuzz.runner import FuzzReport, Violation, main, run_atheris, run_fuzz
from faults.fuzz.table import RECORD_TARGETS, TARGETS, TARGETS_BY_NAME
from faults.fuzz.target import InvariantBroken, Target

__all__ = ["RECORD_TARGETS", "TARGETS", "TARGETS_BY_NAME", "FuzzReport", "InvariantBroken", "Target", "Violation",
           "input_for", "main", "mutate", "run_atheris", "run_fuzz"]
