"""Fault drivers of pyspark-s2s (docs/reliability.md): the harness shared by the fault suite
(tests/faults/) and the longer commands run by hand:

* ``python -m faults.randomized --rounds 100 [--seed N]`` -- a mixed workload under randomly
  chosen faults; reports rounds, FlowFiles moved, lost and duplicated.
* ``python -m faults.fuzz --inputs 1000000 [--seed N]`` -- every decoder and parser fed mutated
  input.
* ``python -m faults.soak --minutes 3`` -- sustained send and receive with memory, threads, file
  descriptors and open transactions sampled.

Not part of the installed package's API; run from the repository root with the project's venv.
"""
