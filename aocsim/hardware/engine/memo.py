"""One memo for results too costly to compute twice: a chip's tile programs, its emitters' measured
cubics, its static draws, compiled graphs.

A `Memo` keeps up to `size` results in memory, the least recently used forgotten first, and, where it
has a store (`stored`), also in the folder `aocsim.disk_memo` uses (the calibration store, or a
sweep's folder). Its key is derived here, the same way for memory and folder, from the inputs a
caller names (`derive`: a tensor by its dtype, device, shape, strides and bits, a profile by all its
values, a dataclass by its fields) and from what decides the bits besides them (`disk_memo.machine`:
torch's build, the CPU, the thread count; in the folder also aocsim's version and a digest of its
code). So a result computed at another thread count, or for a tensor of other strides, is never
served, in this process or a later one.

A hit draws nothing: the tests that check which random streams a run draws (`keys.recording`) run with
the store off (`AOCSIM_CACHE_DIR=off`) and forget every memo first (`forget_all`), so that each result
is computed, once, inside the recording.
"""

from __future__ import annotations

import dataclasses
import hashlib
import weakref
from collections import OrderedDict
from typing import Any, Callable, Generic, Mapping, TypeVar

import numpy as np
import torch

from aocsim import disk_memo
from aocsim.hardware.engine import keys
from aocsim.hardware.profiles.profile import DeviceProfile

T = TypeVar("T")


def tensor_digest(t: torch.Tensor) -> tuple:
    """A tensor's identity by value: dtype, device, shape, strides and a hash of its bits."""
    data = t.detach().to("cpu").contiguous()
    raw = data.reshape(-1).view(torch.uint8).numpy().tobytes()  # any dtype's bits
    return ("tensor", str(t.dtype), str(t.device), tuple(t.shape), tuple(t.stride()), hashlib.sha256(raw).hexdigest())


def derive(value: Any) -> Any:
    """A hashable key part for `value`: tensors and arrays by their bits, mappings by their sorted items,
    dataclasses by type and fields, a profile by its values. A frozen dataclass that holds nothing mutable (no
    tensor, no writeable array: a profile's components, `DeviceProfile.parts`, built once per profile) is
    derived once and remembered by identity: a chip's static draws are looked up for every tile of every
    weight load (aocsim/hardware/engine/programming.py), and deriving a profile's every value each time
    cost a tenth of a search."""
    global _MUTABLE
    if value is None or isinstance(value, (bool, int, float, str, bytes)):  # first: keys are mostly these, and
        return value  # a compiled graph's is derived at every call
    if type(value) is tuple or type(value) is list:
        return tuple(derive(v) for v in value)
    if isinstance(value, torch.Tensor):
        _MUTABLE += 1
        return tensor_digest(value)
    if isinstance(value, np.ndarray):
        _MUTABLE += int(value.flags.writeable)
        return ("array", str(value.dtype), value.shape, hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest())
    if isinstance(value, (torch.dtype, torch.device)):
        return str(value)
    if isinstance(value, keys.Key):
        return ("key", value.value)
    if isinstance(value, Mapping):
        return tuple((str(k), derive(v)) for k, v in sorted(value.items(), key=lambda kv: str(kv[0])))
    if isinstance(value, DeviceProfile):
        return ("profile", derive(value.values))  # its values decide the bits; its name and file do not
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        frozen = type(value).__dataclass_params__.frozen  # type: ignore[attr-defined]
        entry = _FROZEN.get(id(value)) if frozen else None
        if entry is not None and entry[0] is value:
            return entry[1]
        before = _MUTABLE
        key = (type(value).__qualname__, *((f.name, derive(getattr(value, f.name))) for f in dataclasses.fields(value)))
        if frozen and _MUTABLE == before:  # (holding the object keeps its id from being reused)
            _FROZEN[id(value)] = (value, key)
            while len(_FROZEN) > FROZEN_KEPT:
                _FROZEN.popitem(last=False)
        return key
    if isinstance(value, (list, tuple)):  # a named tuple, a subclass
        return tuple(derive(v) for v in value)
    raise TypeError(f"memo: cannot derive a key from a {type(value).__name__}; expected tensors, arrays, numbers, "
                    "strings, mappings, dataclasses or profiles")


_MUTABLE = 0  # tensors and writeable arrays met by `derive` so far: a dataclass holding one is not remembered
_FROZEN: OrderedDict[int, tuple[Any, Any]] = OrderedDict()  # id -> (a frozen dataclass, its derived key)
FROZEN_KEPT = 256


MEMOS: "weakref.WeakSet[Memo[Any]]" = weakref.WeakSet()  # every memo alive: a benchmark starts each timing cold


def forget_all() -> None:
    """Empty every memo's memory (their folders are left as they are): what a fresh process has."""
    for memo in MEMOS:
        memo.clear()
    _FROZEN.clear()


class Memo(Generic[T]):
    """Results by the inputs that decide them (module docstring).

    Args:
        kind: the results' name (a folder entry's file name starts with it; `disk_memo.computed` counts it).
        size: results kept in memory at most.
        stored: whether results also go to the folder (`to_records` / `from_records` turn one into HDF5
            records of tensors and numbers and back).
        hashed: the inputs are already a key by value (numbers, strings, frozen dataclasses of them: a
            compiled graph's, looked up at every call), used as they are instead of `derive`d.
    """

    def __init__(self, kind: str, size: int, *, stored: bool = False,
                 to_records: Callable[[T], list[dict[str, Any]]] | None = None,
                 from_records: Callable[[list[dict[str, Any]]], T] | None = None, hashed: bool = False) -> None:
        if stored and (to_records is None or from_records is None):
            raise TypeError(f"Memo({kind!r}, stored=True) needs to_records and from_records")
        self.kind, self.size, self.stored = kind, size, stored
        self.to_records, self.from_records, self.hashed = to_records, from_records, hashed
        self._entries: OrderedDict[tuple, T] = OrderedDict()
        MEMOS.add(self)

    def key(self, inputs: tuple) -> tuple:
        """The key of `inputs` (memory's; the folder's is its digest with the version and the code)."""
        return (self.kind, inputs if self.hashed else derive(inputs), disk_memo.machine())

    def _lookup(self, key: tuple) -> bool:
        """Whether `key`'s result can be served: remembered, or read from the folder now."""
        if key not in self._entries and self.stored:
            stored = disk_memo.load(self.kind, key)  # computed by an earlier process, or another of a sweep
            if stored is not None:
                self._entries[key] = self.from_records(stored)  # type: ignore[misc]
        return key in self._entries

    def _keep(self, key: tuple, value: T) -> None:
        """`value` remembered under `key` (and written to the folder), the least recently used forgotten."""
        self._entries[key] = value
        self._entries.move_to_end(key)
        if self.stored:
            disk_memo.save(self.kind, key, self.to_records(value))  # type: ignore[misc]
        self._trim()

    def _trim(self) -> None:
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def _served(self, key: tuple) -> T:
        """The result `_lookup` found for `key`, marked as used last (a result read from the folder counts
        against the size)."""
        self._entries.move_to_end(key)
        value = self._entries[key]
        self._trim()
        return value

    def __call__(self, inputs: tuple, compute: Callable[[], T]) -> T:
        """The result for `inputs`: remembered, read from the folder, or `compute()`d (and kept)."""
        key = self.key(inputs)
        if self._lookup(key):
            return self._served(key)
        value = compute()
        self._keep(key, value)
        return value

    def many(self, inputs: list[tuple], compute: Callable[[list[int]], list[T]]) -> list[T]:
        """The results for several inputs (a population's): those remembered or stored as one call gives them,
        the others computed together by `compute(indices)` (their results in that order) and kept, each under
        its own key, as if computed alone (a population's fits are each point's own: tests/experiments/test_population.py)."""
        keyed = [self.key(one) for one in inputs]  # each derived once: a fit's key digests its tensors
        found = {i: self._served(key) for i, key in enumerate(keyed) if self._lookup(key)}
        missing = [i for i in range(len(inputs)) if i not in found]
        for i, value in zip(missing, compute(missing) if missing else []):
            self._keep(keyed[i], value)
            found[i] = value
        return [found[i] for i in range(len(inputs))]

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, inputs: tuple) -> bool:
        return self.key(inputs) in self._entries

    def clear(self) -> None:
        self._entries.clear()

    def fresh(self) -> "Memo[T]":
        """An empty memo of the same kind, size and store (a test's own, in place of a module's)."""
        return Memo(self.kind, self.size, stored=self.stored, to_records=self.to_records,
                    from_records=self.from_records, hashed=self.hashed)
