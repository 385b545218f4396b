"""Random streams never meet: every key a compare draws from, for chips and seeds 0-9 and each kind of
placed model, belongs to one purpose of one chip or one seed (aocsim/hardware/engine/keys.py:
`Stream`, `chip_root`). A key remembers the coordinates it was folded from (`Key.path`); two
different paths with the same value are two purposes drawing the same numbers."""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch

from aocsim import DEQ, DEQConfig, compare
from aocsim.hardware.engine import keys
from aocsim.hardware.engine.keys import Stream
from aocsim.nn.implicit_ssm import ImplicitSSM, SSMConfig
from _streams import fresh_recording

IDS = range(10)


def _deq(n: int) -> DEQ:
    model = DEQ(DEQConfig(n, 8, 3), generator=torch.Generator().manual_seed(n))
    with torch.no_grad():
        model.weight.mul_(0.4 / torch.linalg.matrix_norm(model.operator(), ord=2))
    return model


def _ssm() -> ImplicitSSM:
    config = SSMConfig(vocab_size=2, d_model=8, d_state=4, expand=2, head_dim=8)
    return ImplicitSSM(config, generator=torch.Generator().manual_seed(1)).double()


def _purposes(path: tuple) -> set[Stream]:
    return {c for c in path if isinstance(c, Stream)}


CASES = {  # each kind of placed model on the 16-channel machine, every stream it has switched on
    "native": lambda: (_deq(16), torch.rand(2, 8, dtype=torch.float64), None,
                       {"fit": False, "max_iter": 3}),
    "tiled": lambda: (_deq(24), torch.rand(2, 8, dtype=torch.float64), torch.rand(16, 8, dtype=torch.float64),
                      {"max_iter": 2, "averaging": 2, "fit_probes": 64}),
    "hybrid": lambda: (_ssm(), torch.tensor([[0, 1, 1]]), torch.tensor([[1, 0, 1, 1]]),
                       {"max_iter": 2, "averaging": 2, "elementwise": "analog", "snr_db": 30.0, "ema_alpha": 0.5,
                        "fit_probes": 64}),  # (the fits' quality plays no part here; their streams do)
}
EXPECTED = {
    "native": {Stream.VARIATION, Stream.DARK, Stream.PROGRAMMING, Stream.DRIFT, Stream.ITERATION},
    "tiled": {Stream.VARIATION, Stream.DARK, Stream.PROGRAMMING, Stream.TILE_CALL, Stream.REPEAT, Stream.HOLD},
    "hybrid": {Stream.VARIATION, Stream.DARK, Stream.ELEMENTWISE, Stream.PROGRAMMING, Stream.TILE_CALL, Stream.REPEAT,
               Stream.SNR},
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(CASES))
def test_no_two_purposes_share_a_stream_for_chips_and_seeds_0_to_9(kind: str) -> None:
    model, inputs, calibration, placement = CASES[kind]()
    with fresh_recording() as drawn:
        compare(model, "aoc16", inputs, placement=placement, seeds=IDS, chips=IDS, calibration=calibration)
    paths: dict[int, set[tuple]] = defaultdict(set)
    for key in drawn:
        paths[key.value].add(key.path)
    shared = {value: sorted(map(str, p)) for value, p in paths.items() if len(p) > 1}
    assert not shared, f"{len(shared)} keys drawn for two purposes, e.g. {next(iter(shared.values()))}"
    seen = set().union(*(_purposes(p) for p in set().union(*paths.values())))
    assert EXPECTED[kind] <= seen, f"streams not drawn: {EXPECTED[kind] - seen}"
    # every chip and every seed drew: ten of each root
    roots = {p[:2] for p in set().union(*paths.values())}
    assert {("chip", c) for c in IDS} <= roots and {("seed", s) for s in IDS} <= roots


def test_chip_roots_and_run_roots_are_derived_apart() -> None:
    """The same number as a chip and as a seed gives two different roots; a path names its origin."""
    for n in IDS:
        assert keys.chip_root(n) != keys.as_key(n)
        assert keys.chip_root(n).path == ("chip", n) and keys.as_key(n).path == ("seed", n)
    assert keys.as_key(3).fold(Stream.DRIFT).path == ("seed", 3, Stream.DRIFT)
