"""Progress display: a tqdm bar on a terminal, a plain log line now and then elsewhere.

Off a terminal (a log file, CI, a pipe) tqdm's carriage-return updates become
one long unreadable line; `LineWriter` turns them into one line every
`interval_s` seconds plus the final one, so long runs still show they are alive.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import IO, Any, Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")

# Seconds between progress lines when stderr is not a terminal.
LINE_INTERVAL_S = 10.0


class LineWriter:
    """A file for tqdm that writes its latest status as a line, at most every `interval_s` seconds."""

    def __init__(self, stream: IO[str], interval_s: float = LINE_INTERVAL_S) -> None:
        self.stream, self.interval_s = stream, interval_s
        self._pending = self._last = ""
        self._last_time = -float("inf")

    def write(self, text: str) -> int:
        for piece in text.split("\r"):
            status, newline, _ = piece.partition("\n")
            if status.strip():
                self._pending = status.strip()
            if status.strip() or newline:  # tqdm ends a bar with a newline: always show the last state
                self._emit(force=bool(newline))
        return len(text)

    def _emit(self, *, force: bool) -> None:
        now = time.monotonic()
        if self._pending and self._pending != self._last and (force or now - self._last_time >= self.interval_s):
            self.stream.write(self._pending + "\n")
            self.stream.flush()
            self._last, self._last_time = self._pending, now

    def flush(self) -> None:
        self.stream.flush()


def on_terminal() -> bool:
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


@contextlib.contextmanager
def lines_off_terminal(interval_s: float = LINE_INTERVAL_S) -> Iterator[None]:
    """Within the block, progress bars drawn on stderr become periodic lines unless stderr is a terminal."""
    if on_terminal():
        yield
        return
    with contextlib.redirect_stderr(LineWriter(sys.stderr, interval_s)):  # type: ignore[arg-type]
        yield


def bar(iterable: Iterable[T], *, desc: str, total: int | None = None, enabled: bool = True,
        weight: Callable[[T], int] | None = None) -> Iterable[T]:
    """`iterable` wrapped in a tqdm bar (on stderr, as it is at the time of the call); `weight`: how many of
    the `total` units each item stands for (a compare part of several runs), else one."""
    from tqdm.auto import tqdm

    if weight is None:
        return tqdm(iterable, desc=desc, total=total, disable=not enabled, file=sys.stderr)
    return _weighted(tqdm(total=total, desc=desc, disable=not enabled, file=sys.stderr), iterable, weight)


def _weighted(progress: Any, iterable: Iterable[T], weight: Callable[[T], int]) -> Iterator[T]:
    with progress:
        for item in iterable:
            yield item
            progress.update(weight(item))
