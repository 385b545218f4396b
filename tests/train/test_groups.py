"""State-tracking tasks: Cayley tables, prefix products, generation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from aocsim.errors import InputError, UnknownNameError
from aocsim.tasks.groups import group, prefix_products, subgroup_elements, word_problems


@pytest.mark.parametrize(("name", "order", "is_group"), [
    ("parity", 2, True), ("Z5", 5, True), ("S3", 6, True), ("A4", 12, True), ("S4", 24, True),
    ("A5", 60, True), ("S5", 120, True), ("M4", 4, False), ("A4 x M4", 48, False), ("Z2xZ3", 6, True),
])
def test_tables_are_associative_with_identity_zero(name: str, order: int, is_group: bool) -> None:
    g = group(name)
    t = g.table
    assert g.order == order and g.is_group == is_group
    idx = np.arange(order)
    assert (t[0] == idx).all() and (t[:, 0] == idx).all()
    assert (t[t[:, :, None], idx[None, None, :]] == t[idx[:, None, None], t[None, :, :]]).all()  # (ab)c = a(bc)
    if is_group:  # Latin square
        assert all(len(set(row)) == order for row in t)


def test_monoid_relations_and_product_indexing() -> None:
    m = group("M4").table
    e, a, b, x = range(4)
    assert m[a, a] == x and m[a, b] == x and m[b, a] == a and m[b, b] == b
    assert (m[x] == x).all() and (m[:, x] == x).all()
    prod = group("A5 x M4")
    a5 = group("A5").table
    g1, g2, h1, h2 = 7, a, 13, b
    assert prod.table[4 * g1 + g2, 4 * h1 + h2] == 4 * a5[g1, h1] + m[g2, h2]


def test_alternating_groups_are_not_abelian_and_cyclic_ones_are() -> None:
    assert (group("Z7").table == group("Z7").table.T).all()
    assert not (group("A5").table == group("A5").table.T).all()


def test_prefix_products_are_left_to_right_and_include_the_current_token() -> None:
    g = group("S3")
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 6, size=(5, 12))
    targets = prefix_products(g, tokens)
    for b in range(5):
        for t in range(12):
            assert targets[b, t] == g.product(tokens[b, : t + 1])


def test_generation_is_deterministic_and_has_the_identity_rate() -> None:
    g = group("A5")
    t1, y1 = word_problems(g, 400, 250, identity_prob=0.3, generator=11)
    t2, y2 = word_problems(g, 400, 250, identity_prob=0.3, generator=11)
    t3, _ = word_problems(g, 400, 250, identity_prob=0.3, generator=12)
    assert (t1 == t2).all() and (y1 == y2).all() and not (t1 == t3).all()
    n = t1.numel()
    rate = float((t1 == 0).double().mean())
    assert abs(rate - 0.3) < 5 * math.sqrt(0.3 * 0.7 / n)
    others = t1[t1 != 0]
    assert others.min() >= 1 and others.max() <= 59
    counts = np.bincount(others.numpy(), minlength=60)[1:]
    assert counts.min() > 0.8 * counts.mean()  # uniform over the non-identity elements


def test_bad_names_and_arguments() -> None:
    with pytest.raises(UnknownNameError, match="unknown group 'Q8'"):
        group("Q8")
    with pytest.raises(UnknownNameError):
        group("S12")  # too large a table
    with pytest.raises(InputError, match="identity_prob = 1.5"):
        word_problems(group("Z2"), 2, 3, identity_prob=1.5, generator=0)
    with pytest.raises(InputError, match="length = 0"):
        word_problems(group("Z2"), 2, 0, generator=0)


def test_a5_inside_s5_is_a_subgroup_of_even_permutations() -> None:
    g = group("S5")
    a5 = subgroup_elements(g, "A5")
    assert len(a5) == 60 and a5[0] == 0  # index 2, the identity in it
    inside = np.zeros(g.order, bool)
    inside[a5] = True
    assert inside[g.table[np.ix_(a5, a5)]].all()  # closed under the product
    assert not inside[g.table[np.ix_(a5, np.flatnonzero(~inside))]].any()  # even x odd is odd
    table = g.table[np.ix_(a5, a5)]
    relabel = np.full(g.order, -1)
    relabel[a5] = np.arange(60)
    assert np.array_equal(relabel[table], group("A5").table)  # A5's own table, in the same order
    with pytest.raises(InputError, match=r"subgroup = 'A4' of S5; expected A<n> of S<n>"):
        subgroup_elements(g, "A4")


def test_a_subgroup_curriculum_draws_inside_it_and_then_uniformly() -> None:
    """outside_prob 0: every non-identity token in A5; outside_prob 60/119: uniform over the 119 others,
    each element's count within 5 standard deviations of the binomial's."""
    g = group("S5")
    a5 = subgroup_elements(g, "A5")
    tokens, targets = word_problems(g, 64, 40, identity_prob=0.2, generator=3, within=a5)
    assert np.isin(tokens.numpy(), a5).all() and np.isin(targets.numpy(), a5).all()
    assert abs(float((tokens == 0).double().mean()) - 0.2) < 5 * math.sqrt(0.16 / tokens.numel())
    tokens, _ = word_problems(g, 400, 300, identity_prob=0.0, generator=4, within=a5, outside_prob=60 / 119)
    counts = np.bincount(tokens.numpy().ravel(), minlength=120)
    n, p = tokens.numel(), 1 / 119
    assert counts[0] == 0 and (abs(counts[1:] - n * p) < 5 * math.sqrt(n * p * (1 - p))).all()
    with pytest.raises(InputError, match="outside_prob = 1.5"):
        word_problems(g, 2, 3, generator=0, within=a5, outside_prob=1.5)
