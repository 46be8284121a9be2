"""The fuzzer's target table: every area's targets in one list, in the order a run takes them.

Owns: :data:`TARGETS` (protocol core, client and option parsers, server), :data:`RECORD_TARGETS`
and :data:`TARGETS_BY_NAME`. Must not import: the runner or the mutator, tests/.
"""

from __future__ import annotations

from faults.fuzz import client, protocol, records, server
from faults.fuzz.target import Target

__all__ = ["RECORD_TARGETS", "TARGETS", "TARGETS_BY_NAME"]

TARGETS: list[Target] = [*protocol.TARGETS, *client.TARGETS, *server.TARGETS]
#: the record readers' targets (``--records``; not in :data:`TARGETS`, whose run takes 2 minutes
#: per million inputs, where a record reader takes about a millisecond per input)
RECORD_TARGETS: list[Target] = records.TARGETS
#: the targets by name (the suite's Hypothesis tests drive them with their own strategies)
TARGETS_BY_NAME: dict[str, Target] = {t.name: t for t in TARGETS + RECORD_TARGETS}
