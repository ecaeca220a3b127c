"""The fixed steps of the sequencer every unit shares (``aipu.rtl.unit``; docs/rtl.md, "Units").

A unit takes the head word of its queue in one cycle, checks it in the next, and may start it in the one
after: its first command can start in cycle 2, and a command after one that retired in cycle r in cycle
r + 3. Waiting for tokens, for room in a token queue or (FINISH) for the other units only delays the start
further. A command's formula counts from its start to its retire.
"""
from __future__ import annotations

FIRST_START = 2         # take (cycle 0), check (cycle 1), start (cycle 2)
NEXT_START = 3          # after a retire in cycle r: take r + 1, check r + 2, start r + 3
