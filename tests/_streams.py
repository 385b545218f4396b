"""What a test of which random streams a run draws needs: every memo forgotten first (and the store off, as
tests/conftest.py sets it), so that each result the run uses is computed, once, inside the recording (a memo
serves a remembered or stored result without drawing and replays nothing: aocsim/hardware/engine/memo.py)."""

from __future__ import annotations

import contextlib
from typing import Iterator

from aocsim.hardware.engine import keys, memo


@contextlib.contextmanager
def fresh_recording() -> Iterator[list[keys.Key]]:
    """`keys.recording()` after `memo.forget_all()`: the list of every key the block draws from."""
    memo.forget_all()
    with keys.recording() as drawn:
        yield drawn
