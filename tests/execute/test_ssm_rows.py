"""Sequential mode with every row on its own token (aocsim/execute/ssm_rows.py, a placed model's token loop): each row goes through the
iterations, stops and states of its token-by-token solve, in passes that carry every row with tokens
left instead of a token's last few."""

from __future__ import annotations

import pytest
import torch

from aocsim import load_model
from aocsim.execute.placement import HYBRID, Placement
from aocsim.execute.seed_stack import stack_seeds
from aocsim.execute.snr import SiteNoise
from aocsim.execute.ssm_device import place_ssm
from aocsim.execute.token_loop import TokenLoop
from aocsim.hardware.engine import keys
from aocsim.hardware.profiles.profile import load_device
from aocsim.tasks.groups import group, word_problems
from _parity import assert_same_ssm_run


class Passes:
    """Counts the model's passes (f_token calls) and records the rows of each."""

    def __init__(self, model) -> None:
        self.calls, self.rows = 0, []
        self.inner, self.model = model.f_token, model

    def __enter__(self) -> "Passes":
        def counted(z, u, caches):
            self.calls += 1
            self.rows.append(z.shape[0])
            return self.inner(z, u, caches)
        self.model.f_token = counted
        return self

    def __exit__(self, *exc) -> None:
        del self.model.f_token


def _same_run(a, b, atol: float = 1e-5) -> None:
    """Rows on their own tokens against token by token: another grouping of rows in the passes, so the same
    results in statistics (tests/_parity.py)."""
    assert_same_ssm_run(a, b, atol)


@pytest.mark.parametrize("rows", [24, 6, 3])
def test_a_placed_model_with_rows_on_their_own_tokens_gives_the_token_by_token_results(parity_words, rows: int) -> None:
    """aoc48, noise on, a tight tolerance and a low cap (some rows run to it): every prediction, iteration
    count and residual of the token-by-token solve, states and traces to rounding, in fewer passes."""
    model, tokens, cal = parity_words
    placed = place_ssm(model, load_device("aoc48"), cal, Placement().resolved(HYBRID), generator=0)
    assert placed.independent
    runs, passes = {}, {}
    for own in (True, False):
        placed.independent = own
        with Passes(placed.model) as counted:
            runs[own] = placed(tokens[:rows], generator=4, mode="sequential", tol=0.1, max_iter=12, trace=True)
        passes[own] = counted
    a, b = runs[True], runs[False]
    _same_run(a, b)
    assert bool((a.iterations == 12).any()) and bool((a.iterations < 12).any())
    assert passes[True].calls < (0.7 if rows > 3 else 1.0) * passes[False].calls
    # the last passes carry only the rows still going: fewer than the 4 rows they were once padded to
    assert min(passes[True].rows) < min(4, rows) and max(passes[True].rows) == rows


def test_the_exact_model_with_rows_on_their_own_tokens_gives_the_token_by_token_results() -> None:
    """Without a device (the loop alone, no observer), float64: the same iterations and residuals, states
    to rounding, with rows that stop after different counts (the cap: the device test above)."""
    model = load_model("parity-implicit").double()
    tokens, _ = word_problems(group("parity"), 9, 12, identity_prob=0.5, generator=5)
    runs = {}
    for own in (True, False):
        with torch.no_grad():
            runs[own] = model(tokens, mode="sequential", tol=2e-3, max_iter=40, trace=True,
                              sequential=TokenLoop(rows_alone=own, own_tokens=own))
    _same_run(runs[True], runs[False], atol=1e-12)
    assert bool((runs[True].iterations == 4).any()) and bool((runs[True].iterations == 5).any())  # rows part ways


def test_full_passes_carry_the_whole_batch_and_change_no_result() -> None:
    """With `full_passes` (compiled tile products: one graph) every pass has every row, finished ones
    padding it; the results are those of passes of the rows going."""
    model = load_model("parity-implicit").double()
    tokens, _ = word_problems(group("parity"), 9, 12, identity_prob=0.5, generator=5)
    runs, rows = {}, {}
    for full in (True, False):
        with torch.no_grad(), Passes(model) as counted:
            runs[full] = model(tokens, mode="sequential", tol=2e-3, max_iter=40, trace=True,
                               sequential=TokenLoop(rows_alone=True, own_tokens=True, full_passes=full))
        rows[full] = set(counted.rows)
    assert rows[True] == {9} and min(rows[False]) < 9
    _same_run(runs[True], runs[False], atol=1e-12)


def test_a_row_that_diverges_at_once_reports_no_residual_of_its_previous_token() -> None:
    """A row whose first evaluation on a token is not finite stops there with the residual the
    token-by-token solve reports (inf: nothing finite on that token), not its previous token's."""
    model = load_model("parity-implicit").double()
    tokens, _ = word_problems(group("parity"), 9, 12, identity_prob=0.5, generator=5)
    with torch.no_grad():
        poisoned = model.injection(tokens).clone()
    poisoned[2, -1] = float("inf")  # row 2's last token: f(z) not finite from its first evaluation
    runs = {}
    for own in (True, False):
        with torch.no_grad():
            runs[own] = TokenLoop(rows_alone=own, own_tokens=own)(model, poisoned, tau=0.8, tol=2e-3, max_iter=40)
    (_, ia, ra, _), (_, ib, rb, _) = runs[True], runs[False]
    assert ib[2, -1] == 0 and torch.isinf(rb[2, -1])  # token by token: stopped at once, no residual
    assert torch.equal(ia, ib)
    torch.testing.assert_close(ra, rb, rtol=0, atol=1e-12)


def test_stacked_seeds_run_with_rows_on_their_own_tokens_as_token_by_token(parity_words) -> None:
    """Seeds stacked in one batch (aocsim/execute/seed_stack.py), each row through its own seed's load at
    its own visit: each seed's results as token by token."""
    model, tokens, cal = parity_words
    device = load_device("aoc48")
    seeds = [place_ssm(model, device, cal, Placement().resolved(HYBRID), generator=s) for s in (0, 1)]
    stack = stack_seeds(model, seeds)
    runs, rows = {}, {}
    for own in (True, False):
        stack.independent = own
        with Passes(stack.model) as counted:
            runs[own] = stack(tokens[:10], generator=[keys.as_key(4), keys.as_key(5)], mode="sequential", tol=0.1,
                              max_iter=12, trace=True)
        rows[own] = counted.rows
    assert not stack.compiled and min(rows[True]) < 20  # passes of the rows going, not padded to the batch
    for a, b in zip(runs[True], runs[False]):
        _same_run(a, b)


def test_rows_stay_on_one_token_where_a_part_keys_by_the_pass(parity_words) -> None:
    """Analog elementwise functions and time-multiplexed tiles key by the pass's visit: such a placed
    model runs token by token."""
    model, _, cal = parity_words
    device = load_device("aoc48")
    analog = place_ssm(model, device, cal, Placement(elementwise="analog").resolved(HYBRID), generator=0)
    multiplexed = place_ssm(model, device, cal, Placement(modules=2).resolved(HYBRID), generator=0)
    assert not analog.independent and not multiplexed.independent


def test_the_models_know_no_device(parity_words) -> None:
    """aocsim/nn imports nothing of execution, and a placed run (rows alone, noise on the committed states,
    the reference's token iteration) leaves its model with the attributes of a fresh one: the placed model
    owns its token loop and observes the passes (aocsim/execute/token_loop.py), nothing is set on the model."""
    import pathlib

    import aocsim.nn
    from aocsim.execute.snr import ReferenceSolve
    from aocsim.nn.implicit_ssm import ImplicitSSM

    for source in pathlib.Path(aocsim.nn.__file__).parent.glob("*.py"):
        assert "aocsim.execute" not in source.read_text(), source.name
    model, tokens, cal = parity_words
    placed = place_ssm(model, load_device("aoc48"), cal, Placement().resolved(HYBRID), generator=0)
    fresh = set(vars(ImplicitSSM(model.config)))
    seen = []
    with placed.keyed(4, torch.arange(4), tokens.shape[1], (SiteNoise("states", 20.0, "additive"),
                                                             ReferenceSolve(None, batch=True)), 7) as run:
        original = run.model.f_token

        def watched(z, u, caches):  # what the model carries while the run is open
            seen.append(set(vars(run.model)))
            return original(z, u, caches)

        run.model.f_token = watched
        with torch.no_grad():
            run(tokens[:4], mode="sequential", tol=0.1, max_iter=8)
        del run.model.f_token
    assert seen and all(attributes - {"f_token"} == fresh for attributes in seen)
    assert set(vars(placed.model)) == fresh
