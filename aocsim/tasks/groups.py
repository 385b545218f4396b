"""Word problems on finite groups and monoids: the state-tracking tasks.

Elements are integers 0..order-1 with 0 the identity; `table[a, b]` is the
product a*b. A sequence of tokens g_1..g_L (element indices) has targets
y_t = g_1 g_2 ... g_t (left to right, including token t, unshifted).

Names accepted by `group(name)`:
    Z<n> (cyclic; "parity" = Z2), S<n> (symmetric), A<n> (alternating),
    M4 (the aperiodic monoid {E, A, B, X} of Schoene et al. 2025: E identity,
    X absorbing, A*A = X, A*B = X, B*A = A, B*B = B), and direct products
    "G x H" / "GxH" (index = |H| g + h, as in the paper's A5 x M with 4 g + m).

Permutations compose as functions: (a*b)(i) = a(b(i)); elements are the
permutations of 0..n-1 in lexicographic order (identity first).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from aocsim.errors import InputError, UnknownNameError

MAX_PERMUTATION_DEGREE = 7  # S7 has 5,040 elements: a table of 25 M entries


@dataclass(frozen=True)
class Group:
    """A finite group or monoid given by its Cayley table (index 0 = identity)."""

    name: str
    table: np.ndarray  # int64 [order, order], read-only

    @property
    def order(self) -> int:
        return self.table.shape[0]

    @property
    def is_group(self) -> bool:
        """Every element has an inverse."""
        return bool((self.table == 0).any(axis=1).all())

    def product(self, tokens: np.ndarray) -> int:
        """g_1 g_2 ... g_L of one sequence (reference, not vectorised)."""
        acc = 0
        for g in tokens:
            acc = int(self.table[acc, g])
        return acc


def _freeze(table: np.ndarray) -> np.ndarray:
    table = np.ascontiguousarray(table, dtype=np.int64)
    table.setflags(write=False)
    return table


def _cyclic(n: int) -> np.ndarray:
    idx = np.arange(n)
    return (idx[:, None] + idx[None, :]) % n


def _even(p: tuple[int, ...]) -> bool:
    n = len(p)
    return sum(p[i] > p[j] for i in range(n) for j in range(i + 1, n)) % 2 == 0


def _permutations(n: int, even_only: bool) -> np.ndarray:
    perms = [p for p in itertools.permutations(range(n)) if not even_only or _even(p)]
    arr = np.array(perms, dtype=np.int64)
    index = {p: i for i, p in enumerate(perms)}
    composed = arr[:, arr]  # composed[a, b, i] = a[b[i]]
    return np.vectorize(lambda a, b: index[tuple(composed[a, b])])(*np.meshgrid(
        np.arange(len(perms)), np.arange(len(perms)), indexing="ij"))


def _monoid4() -> np.ndarray:
    e, a, b, x = range(4)
    t = np.full((4, 4), x)
    for g in range(4):
        t[e, g], t[g, e] = g, g
    t[a, a], t[a, b], t[b, a], t[b, b] = x, x, a, b
    return t


def _product(t1: np.ndarray, t2: np.ndarray) -> np.ndarray:
    n1, n2 = len(t1), len(t2)
    g1, g2 = np.divmod(np.arange(n1 * n2), n2)
    return n2 * t1[g1[:, None], g1[None, :]] + t2[g2[:, None], g2[None, :]]


@lru_cache(maxsize=32)
def group(name: str) -> Group:
    """The group or monoid called `name` (see the module docstring)."""
    if not isinstance(name, str):
        raise InputError(f"group name must be a string; got {type(name).__name__}")
    parts = [p.strip() for p in re.split(r"\s*[x×]\s*(?=[ZSAM]|parity)", name.strip()) if p.strip()]
    if len(parts) > 1:
        table = group(parts[0]).table
        for part in parts[1:]:
            table = _product(table, group(part).table)
        return Group(" x ".join(parts), _freeze(table))
    key = name.strip()
    if key.lower() == "parity":
        return Group("Z2", _freeze(_cyclic(2)))
    if key == "M4":
        return Group("M4", _freeze(_monoid4()))
    m = re.fullmatch(r"([ZSA])(\d+)", key)
    if m:
        kind, n = m.group(1), int(m.group(2))
        if kind == "Z" and n >= 1:
            return Group(key, _freeze(_cyclic(n)))
        if kind in "SA" and 2 <= n <= MAX_PERMUTATION_DEGREE:
            return Group(key, _freeze(_permutations(n, even_only=kind == "A")))
    raise UnknownNameError("group", name, ["Z<n>", "parity", f"S<n> / A<n> (n <= {MAX_PERMUTATION_DEGREE})",
                                            "M4", "G x H"])


def subgroup_elements(g: Group, name: str) -> np.ndarray:
    """The indices in `g` of the elements of its subgroup `name` (ascending): A<n> in S<n>, the even
    permutations (the alternating group, index 2)."""
    m = re.fullmatch(r"S(\d+)", g.name)
    if m is None or name != f"A{m.group(1)}":
        raise InputError(f"subgroup = {name!r} of {g.name}; expected A<n> of S<n> (the even permutations)")
    n = int(m.group(1))
    return np.flatnonzero([_even(p) for p in itertools.permutations(range(n))])


def prefix_products(g: Group, tokens: np.ndarray) -> np.ndarray:
    """Targets y[:, t] = tokens[:, 0] * ... * tokens[:, t], vectorised over the batch. [B, L] -> [B, L]."""
    tokens = np.asarray(tokens, dtype=np.int64)
    out = np.empty_like(tokens)
    acc = np.zeros(tokens.shape[0], dtype=np.int64)
    table = g.table
    for t in range(tokens.shape[1]):
        acc = table[acc, tokens[:, t]]
        out[:, t] = acc
    return out


def word_problems(g: Group, batch: int, length: int, *, identity_prob: float = 0.0,
                  generator: np.random.Generator | int, within: np.ndarray | None = None,
                  outside_prob: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random sequences and their prefix products.

    Each token is the identity with probability `identity_prob`, otherwise uniform
    over the other elements (for identity_prob = 1/order, uniform over all); with `within`
    (element indices, a subgroup's: `subgroup_elements`), uniform over its other elements, or with
    probability `outside_prob` over the elements outside it.

    Args:
        g: the group.
        batch, length: B and L.
        identity_prob: p in [0, 1].
        generator: a numpy Generator or an integer seed (same seed, same data).
        within, outside_prob: a subgroup curriculum (None: every element).
    Returns:
        (tokens int64 [B, L], targets int64 [B, L]).
    """
    if not (isinstance(batch, int) and batch >= 1 and isinstance(length, int) and length >= 1):
        raise InputError(f"batch = {batch!r}, length = {length!r}; expected integers >= 1")
    if not 0.0 <= identity_prob <= 1.0:
        raise InputError(f"identity_prob = {identity_prob!r}; expected a number in [0, 1]")
    if not 0.0 <= outside_prob <= 1.0:
        raise InputError(f"outside_prob = {outside_prob!r}; expected a number in [0, 1]")
    rng = generator if isinstance(generator, np.random.Generator) else np.random.default_rng(generator)
    shape = (batch, length)
    if within is not None:
        inside = np.setdiff1d(within, [0])
        outside = np.setdiff1d(np.arange(1, g.order), within)
        if inside.size == 0 or outside.size == 0:
            raise InputError(f"within holds {len(within)} of {g.order} elements; expected a proper subgroup "
                             "with an element besides the identity")
        out = rng.random(shape) < outside_prob
        others = np.where(out, outside[rng.integers(0, outside.size, shape)], inside[rng.integers(0, inside.size, shape)])
    else:
        others = rng.integers(1, g.order, size=shape) if g.order > 1 else np.zeros(shape, np.int64)
    tokens = np.where(rng.random(shape) < identity_prob, 0, others)
    return torch.from_numpy(tokens), torch.from_numpy(prefix_products(g, tokens))
