"""Keyed randomness: every draw of the virtual AOC from a counter-based stream.

A draw is named by coordinates, not by its place in a sequence: the root key
(a seed, or one 64-bit draw of a `torch.Generator`), then what it is for
(chip variation, SLM programming, drift, per-iteration noise) and where it
falls (chip, tile, weight load, inference, iteration, sample, channel, slot).
`fold_in` derives a child key from a key and one coordinate; the elementwise
numbers of a key come from `counter_rng` (SplitMix64, Box-Muller). So the same
seed gives the same numbers eagerly, compiled, on the CPU and on CUDA, and a
sample's noise depends on its sample index, not on its batch or position.

Key derivation runs on Python integers (exact, free, device-independent);
only the elementwise stream is tensor arithmetic, on the state's device.
"""

from __future__ import annotations

from collections import OrderedDict

import enum
from typing import Union

import torch

from aocsim.errors import InputError
from aocsim.hardware.engine.counter_rng import GOLDEN_GAMMA, _signed, normal_pair, splitmix64

MASK64 = (1 << 64) - 1



class Stream(enum.IntEnum):
    """Every purpose a random stream serves: the first coordinate folded under a root key (the one
    registry of purposes). Two roots exist: a chip's (`chip_root`: its fixed pattern, the same for
    every weight load and inference on that chip) and a run's (`as_key(seed)`: a weight load and the
    inferences on it). They are derived apart (`chip_root` folds under its own domain), so no chip
    number and seed make two purposes meet; below a root each purpose folds its own coordinates."""

    # under a run's root
    PROGRAMMING = 2  # a weight load's SLM programming error: (tile,)
    DRIFT = 3  # one inference's drift step
    ITERATION = 4  # one loop iteration's noise: (iteration,)
    TILE_CALL = 5  # one tile pass's noise: (call, tile)
    REPEAT = 7  # the extra passes of a product averaged over several tile passes: (pass,)
    LOAD = 8  # a placed model's weight loads and their calibration: (map or part,)
    RUN = 9  # a placed model's inferences: drift, iterations, tile calls: (map or part,)
    CALIBRATION = 14  # the probe passes that calibrate a weight load (its gains and offsets)
    RELOAD = 15  # a time-multiplexed tile's weight load before a product: (call,), then PROGRAMMING (tile,)
    HOLD = 16  # kT/C noise of an analog partial sum sampled onto its hold after tile i: (call, tile)
    SNR = 19  # noise set by an SNR (aocsim/execute/snr.py): (site, block, visit or part)
    # under a chip's root
    VARIATION = 10  # fixed-pattern variation of a calibrated array: (tile, array index)
    DARK = 11  # each detector's dark current: (tile,)
    ELEMENTWISE = 12  # an analog function circuit's static errors: (block, site, 0 gain | 1 offset | 2 a | 3 b)
    FIT = 13  # what a placement measures on the chip to fit its programs: (map,), then the fit's loads and probes
    EMITTER = 17  # each emitter's LED cubic, its spread about the profile's: (tile,)
    EMITTER_CALIBRATION = 18  # the chip measuring its emitters' cubics for predistortion: (module,), then its passes


CHIP_DOMAIN = 0x43484950  # "CHIP": the domain the chip roots fold under

Seed = Union[int, torch.Generator, "Key", None]


def _mix(x: int) -> int:
    """SplitMix64's output function on Python integers (a bijection of 64-bit words): key derivation
    runs per call or per iteration, where a tensor op would cost more than the arithmetic (the
    elementwise version is `counter_rng.splitmix64`; tests check both against a reference)."""
    x &= MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


class Key:
    """A 64-bit stream key; `key.fold(a, b, ...)` derives the key of a sub-stream.

    `path` names where the key comes from (its root and the coordinates folded since), for tests
    that check that streams never meet and for messages; it plays no part in the numbers."""

    __slots__ = ("value", "path")

    def __init__(self, value: int, path: tuple = ("raw",)) -> None:
        self.value = value & MASK64
        self.path = path

    def fold(self, *coordinates: int) -> "Key":
        """The child key for the given coordinates (non-negative integers), in order."""
        v = self.value
        for c in coordinates:
            if not isinstance(c, int) or c < 0:
                raise InputError(f"stream coordinate = {c!r}; expected an integer >= 0")
            v = _mix(v ^ _mix((c + 1) * GOLDEN_GAMMA))
        return Key(v, self.path + coordinates)

    def tensor(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """The key as an int64 0-dim tensor (the same bits): what an elementwise stream draws from."""
        if _DRAWN is not None:
            _DRAWN.append(self)
        return torch.tensor(_signed(self.value), dtype=torch.int64, device=device)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Key) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"Key(0x{self.value:016x})"


def as_key(seed: Seed, what: str = "generator") -> Key | None:
    """A `Key` from an int seed, a `torch.Generator` (one 64-bit draw of it) or a Key; None stays None."""
    if seed is None or isinstance(seed, Key):
        return seed
    if isinstance(seed, torch.Generator):
        drawn = int(torch.randint(-(1 << 63), (1 << 63) - 1, (), generator=seed, dtype=torch.int64))
        return Key(_mix(drawn & MASK64), ("generator",))
    if isinstance(seed, int) and not isinstance(seed, bool) or _is_numpy_int(seed):
        seed = int(seed)
        if seed < 0:
            raise InputError(f"{what} = {seed!r}; expected an integer seed >= 0, a torch.Generator or None")
        return Key(_mix(seed), ("seed", seed))
    raise InputError(f"{what} = {seed!r}; expected an integer seed >= 0, a torch.Generator, an aocsim Key or None")


def fold_range(bases: list[Key], coordinates: tuple[int, ...], count: int, device: torch.device | str = "cpu"
               ) -> torch.Tensor:
    """int64 [len(bases), count]: base.fold(*coordinates, i).tensor() for every base and i < count (the
    same bits as `Key.fold`; the last fold runs on tensors, `counter_rng.splitmix64` being `_mix`).

    Kept per process (`RANGES_KEPT`, the result shared: read it, never write it): a token-by-token run
    asks for the same streams at every token (a map's key and the iteration's visit)."""
    if _DRAWN is not None:  # recording: every key as a Key, so that its path is kept
        return torch.stack([torch.stack([b.fold(*coordinates, i).tensor(device) for i in range(count)]) for b in bases])
    memo = (tuple(b.value for b in bases), coordinates, count, str(device))
    streams = _RANGES.get(memo)
    if streams is None:
        streams = _RANGES[memo] = _last_fold([[b.fold(*coordinates) for b in bases]], count, device)[0]
        if len(_RANGES) > RANGES_KEPT:
            _RANGES.popitem(last=False)
    return streams


def fold_block(key: Key, stream: int, start: int, count: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """int64 [count]: key.fold(stream, start + i).tensor() for i < count (the same bits as `Key.fold`), in a
    few tensor operations instead of one tensor per key: a loop's iteration keys. Not kept (a run's key
    is its own)."""
    if _DRAWN is not None:  # recording: every key as a Key, so that its path is kept
        return torch.stack([key.fold(stream, start + i).tensor(device) for i in range(count)])
    return _last_fold([[key.fold(stream)]], count, device, start)[0, 0]


def _last_fold(prefixes: list[list[Key]], count: int, device: torch.device | str, start: int = 0) -> torch.Tensor:
    """int64 [len(prefixes), len(prefixes[0]), count]: each prefix key folded with start + i, i < count, on
    tensors."""
    prefix = torch.tensor([[_signed(k.value) for k in row] for row in prefixes], dtype=torch.int64, device=device)
    steps = splitmix64((torch.arange(start, start + count, dtype=torch.int64, device=device) + 1)
                       * _signed(GOLDEN_GAMMA))
    return splitmix64(prefix[..., None] ^ steps)


def fold_calls(bases: list[Key], stream: int, call: "int | torch.Tensor", count: int,
               device: torch.device | str = "cpu", loads: int = 1) -> torch.Tensor:
    """`fold_range(bases, (stream, call), count)` [len(bases), count] for one call. For a call per row
    (call int64 [R], rows on their own iterations: aocsim/execute/ssm_rows.py; with `loads` S, R = S G rows
    in S groups, bases [S P] the loads' in the order (load, pass) and row g of group s drawing from load
    s's) [S, G, P, count], row r's the fold of its own call, read from a table of calls 0, 1, ... kept
    per process (`CALL_TABLES_KEPT`)."""
    if not isinstance(call, torch.Tensor):
        return fold_range(bases, (stream, call), count, device)
    if _DRAWN is not None:  # recording: each call's keys folded as `fold_range` folds them
        values, inverse = torch.unique(call.cpu(), return_inverse=True)
        table = torch.stack([fold_range(bases, (stream, int(v)), count, device) for v in values.tolist()])
        rows = table[inverse.to(table.device)]
    else:
        memo = (tuple(b.value for b in bases), stream, count, str(device))
        table = _CALLS.get(memo)
        top = int(call.max()) + 1 if call.numel() else 0
        if table is None or table.shape[0] < top:  # grown by doubling: a run's visits go up to its cap
            size = max(top, 32, 0 if table is None else 2 * table.shape[0])
            table = _CALLS[memo] = _last_fold([[b.fold(stream, v) for b in bases] for v in range(size)], count, device)
            if len(_CALLS) > CALL_TABLES_KEPT:
                _CALLS.popitem(last=False)
        rows = table[call.to(table.device)]  # [S G, S P, count]
    grouped = rows.view(loads, -1, loads, len(bases) // loads, count)
    per_load = torch.arange(loads, device=rows.device)
    return grouped[per_load, :, per_load]  # each row its own load's: [S, G, P, count]


RANGES_KEPT, CALL_TABLES_KEPT = 4096, 256
_RANGES: OrderedDict[tuple, torch.Tensor] = OrderedDict()
_CALLS: OrderedDict[tuple, torch.Tensor] = OrderedDict()  # `fold_calls`' tables


def chip_root(chip_seed: int) -> Key:
    """The root of a chip's streams (`variation.chip_seed`): folded under CHIP_DOMAIN, so that it
    never equals a run's root `as_key(seed)` for any seed."""
    return Key(_mix(CHIP_DOMAIN), ("chip",)).fold(chip_seed)


# Keys that turned into draws, while `recording()` is on (tests: no two purposes share a stream).
_DRAWN: list[Key] | None = None


class recording:
    """Context manager: every key an elementwise stream draws from (`Key.tensor`, `normals`) is
    appended to the list it yields. A result a memo remembers is served without drawing (nothing is
    replayed), so a test that checks a run's streams runs with the store off and forgets the memos first
    (`memo.forget_all`)."""

    def __enter__(self) -> list[Key]:
        global _DRAWN
        self.previous, _DRAWN = _DRAWN, []
        return _DRAWN

    def __exit__(self, *exc: object) -> None:
        global _DRAWN
        _DRAWN = self.previous


def _is_numpy_int(x: object) -> bool:
    return type(x).__module__ == "numpy" and hasattr(x, "dtype") and getattr(x.dtype, "kind", "") in "iu"


def normals(key: Key, shape: tuple[int, ...], *, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """Standard normals of `key`, element i (row-major) from counter i // 2 (cosine or sine half)."""
    count = 1
    for s in shape:
        count *= s
    pairs = (count + 1) // 2
    counters = torch.arange(1, pairs + 1, dtype=torch.int64, device=device)
    a, b = normal_pair(key.tensor(device), counters, dtype)
    return torch.stack([a, b], dim=1).reshape(-1)[:count].reshape(shape)


def sample_counters(samples: torch.Tensor, channels: int) -> torch.Tensor:
    """Counters [B, N] of (sample s, channel c): 1 + s N + c, so sample s's numbers are its own."""
    c = torch.arange(channels, dtype=torch.int64, device=samples.device)
    return samples.to(torch.int64)[:, None] * channels + c[None, :] + 1


def check_samples(samples: object, batch: int, device: torch.device) -> torch.Tensor:
    """Per-sample stream indices [B] (default 0 ... B-1): a sample's noise follows its index."""
    if samples is None:
        return torch.arange(batch, dtype=torch.int64, device=device)
    if isinstance(samples, int) and not isinstance(samples, bool):
        if samples < 0:
            raise InputError(f"samples = {samples!r}; expected an index >= 0 of the batch's first sample")
        return torch.arange(samples, samples + batch, dtype=torch.int64, device=device)
    if (not isinstance(samples, torch.Tensor) or samples.dtype not in (torch.int64, torch.int32)
            or samples.shape != (batch,) or bool((samples < 0).any())):
        raise InputError(f"samples = {samples!r}; expected None, the first sample's index, or an integer "
                         f"tensor [{batch}] of indices >= 0")
    return samples.to(device=device, dtype=torch.int64)
