"""Solves that evaluate only their active rows (`aocsim.solve.RowMap`; a placed SSM's token map,
aocsim/execute/token_loop.py): the same results as whole batches, at the cost of the rows still iterating."""

from __future__ import annotations

import torch

from aocsim.execute.placement import HYBRID, Placement
from aocsim.execute.snr import EmaReadout, SiteNoise
from aocsim.execute.ssm_device import place_ssm
from aocsim.hardware.profiles.profile import load_device
from aocsim.execute.token_loop import ActiveRowsMap
from aocsim.nn.ssm_token import TokenMap
from aocsim.solve.core import RowMap, solve
from _parity import assert_same_ssm_run


class Contraction:
    """z -> a z + b per row, rates a [B] spread so that rows converge after different counts; counts
    the rows each evaluation sees."""

    def __init__(self, rates: torch.Tensor, b: torch.Tensor) -> None:
        self.rates, self.b, self.seen = rates, b, []

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        self.seen.append(z.shape[0])
        return self.rates[:, None] * z + self.b

    def rows(self, z: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        self.seen.append(z.shape[0])
        return self.rates[index, None] * z + self.b[index]


class WholeBatches:
    def __init__(self, inner: Contraction) -> None:
        self.inner = inner

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        return self.inner(z)


def test_a_row_map_gives_the_whole_batch_results_on_fewer_rows() -> None:
    gen = torch.Generator().manual_seed(0)
    rates = torch.linspace(0.1, 0.9, 8, dtype=torch.float64)
    b = torch.randn(8, 5, generator=gen, dtype=torch.float64)
    rows, whole = Contraction(rates, b), Contraction(rates, b)
    assert isinstance(rows, RowMap) and not isinstance(WholeBatches(whole), RowMap)
    z0 = torch.zeros(8, 5, dtype=torch.float64)
    a = solve(rows, z0, solver="picard", atol=0.0, rtol=1e-9, max_iter=200, trace=True)
    c = solve(WholeBatches(whole), z0, solver="picard", atol=0.0, rtol=1e-9, max_iter=200, trace=True)
    assert torch.equal(a.z, c.z) and torch.equal(a.iterations, c.iterations) and torch.equal(a.status, c.status)
    assert torch.equal(a.trace.isnan(), c.trace.isnan())
    torch.testing.assert_close(a.trace, c.trace, equal_nan=True, rtol=0, atol=0)
    # every evaluation saw the rows still active: one per row and iteration, plus its stopping evaluation
    assert sum(rows.seen) == int((a.iterations + 1).sum()) < sum(whole.seen) == 8 * len(whole.seen)


def test_a_pass_of_few_rows_gives_their_whole_batch_values_to_rounding(parity_words) -> None:
    """Rows evaluated alone give their values in the whole batch to float32 rounding (a product of fewer rows
    may take another BLAS kernel: statistics, not bits, tests/_parity.py); a pass keeps every row's states."""
    model, tokens, _ = parity_words
    u = model.injection(tokens)[:, 0]
    caches = [block.init_cache(u.shape[0], u) for block in model.blocks]
    z = torch.randn(u.shape[0], model.config.d_model, generator=torch.Generator().manual_seed(1)).to(u.dtype)
    with torch.no_grad():
        whole = TokenMap(model, u, caches, 0)(z)
        for picked in ([5], [0, 7], [3, 9, 20]):
            index = torch.tensor(picked)
            one = ActiveRowsMap(model, u, caches, 0)
            one.at = z.clone()
            torch.testing.assert_close(one.rows(z[index], index), whole[index], rtol=1e-5, atol=1e-6)
            assert len(one.last[0].ssm) == u.shape[0]


def test_a_placed_model_runs_its_active_rows_to_the_same_results(parity_words) -> None:
    """Sequential mode on aoc48 (noise on): evaluating only the rows still iterating gives the whole batches'
    results in statistics (tests/_parity.py); the tile products see fewer rows."""
    model, tokens, cal = parity_words
    placed = place_ssm(model, load_device("aoc48"), cal, Placement().resolved(HYBRID), generator=0)
    seen = {True: 0, False: 0}
    layer = placed.maps["blocks.0.in_proj"]
    runs = {}
    for active in (True, False):
        placed.rows_alone = active
        hook = layer.register_forward_pre_hook(lambda _m, args, a=active: seen.__setitem__(a, seen[a] + args[0].shape[0]))
        try:
            runs[active] = placed(tokens, generator=4, mode="sequential", tol=0.1, max_iter=30, trace=True)
        finally:
            hook.remove()
    a, b = runs[True], runs[False]
    assert_same_ssm_run(a, b)  # other rows in the passes: statistics, not bits (tests/_parity.py)
    assert bool((a.iterations < a.iterations.max(0).values).any())  # rows stop at different iterations
    assert seen[True] < 0.8 * seen[False]



def test_the_ema_readout_and_state_noise_follow_the_active_rows(parity_words) -> None:
    """An EMA readout (it sees each pass's rows) and noise on the committed states read the same
    iterates whether a pass holds the whole batch or the rows still iterating."""
    model, tokens, cal = parity_words
    placed = place_ssm(model, load_device("aoc48"), cal, Placement().resolved(HYBRID), generator=0)
    reads = {}
    for active in (True, False):
        placed.rows_alone = active
        parts = (EmaReadout(0.5), SiteNoise("states", 20.0, "additive"))
        out = placed(tokens, generator=4, mode="sequential", tol=0.1, max_iter=30, extras=parts, extras_key=7)
        reads[active] = (out, out.iterations)  # read through the EMA by the placed run
    (a, its_a), (b, its_b) = reads[True], reads[False]
    assert torch.equal(its_a, its_b) and bool((its_a < its_a.max(0).values).any())
    assert torch.equal(a.logits.argmax(-1), b.logits.argmax(-1))
    torch.testing.assert_close(a.z, b.z, rtol=0, atol=1e-5)
