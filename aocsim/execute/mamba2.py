"""The plain Mamba2 language model on a virtual AOC as a hybrid: its linear maps on optical tiles, the
rest digital (`HybridMamba2`).

The model (aocsim/nn/mamba2_lm.py) is one pass per token, no fixed point: embedding, residual Mamba2
blocks, final norm, tied head. Its blocks are the implicit SSM's `Mamba2Block`s, so it is placed by the
hybrid's machinery (aocsim/execute/ssm_device.py): the maps the placement names (`on_tiles`, default
each block's in_proj and out_proj; it has no injection) become calibrated `DeviceLinear`s fitted once
per chip (`fit_programs`) and loaded and calibrated per seed (`place_ssm`); the embedding, RMSNorms,
the causal conv, the scan, SiLU and softplus, and the head stay digital in the model's dtype.

A run is the model's one pass over all tokens at once (the chunked scan), announced to the maps as one
pass of every position at visit 0 (`KeyedRun.one_pass`): token t of sequence s draws its tile noise
at counter s L + t, keyed by the seed, so that a sequence's bits do not depend on its batch (given its
id, `samples`), and are the draws a token-by-token run would make (each token passes each map once,
at visit 0). There is no mode to choose: sequential and simultaneous are the same one pass here.
Each token is reported as one iteration, converged, with residual 0; its Activity prices every map
on tiles once per token (as the hybrid prices an explicit SSM).
"""

from __future__ import annotations

from typing import Any

import torch

from aocsim.errors import InputError
from aocsim.execute.hybrid import SSMOnTiles
from aocsim.execute.inputs import sequence_ids
from aocsim.execute.option_groups import MAMBA2
from aocsim.execute.placement import Placement
from aocsim.execute.run import Run, seed_key
from aocsim.execute.ssm_device import calibration_inputs, on_tiles
from aocsim.hardware.engine import keys
from aocsim.hardware.engine.machine import machine_words
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.nn.mamba2_lm import Mamba2LM
from aocsim.solve.result import SolveResult, SolveStatus


def one_pass(z: torch.Tensor) -> SolveResult:
    """A one-pass model's 'solve' per token [B, L]: one iteration, converged, relative residual 0."""
    shape = z.shape[:-1]
    return SolveResult(z, torch.full(shape, SolveStatus.CONVERGED.value, dtype=torch.int64),
                       torch.ones(shape, dtype=torch.int64), torch.full(shape, float("nan"), dtype=z.dtype),
                       torch.zeros(shape, dtype=z.dtype), None, "one pass (no fixed point)")


class HybridMamba2(SSMOnTiles):
    """A plain Mamba2 language model on one chip of a device (module docstring)."""

    kind = MAMBA2
    residual_units = "relative; 0: one pass per token, no fixed point"
    noise_sites = ("inputs",)  # its one pass commits no states per token (the chunked scan)

    @classmethod
    def convergence_rule(cls, rtol: str, atol: str) -> str:
        return "none: one pass of the model per token (no fixed point)"

    @staticmethod
    def iteration_cap(mode: str | None) -> str:
        return "one pass per token"

    @staticmethod
    def fits(model: Any, profile: DeviceProfile, placement: Placement) -> bool:
        return isinstance(model, Mamba2LM)

    @staticmethod
    def one_pass(model: Mamba2LM) -> str:
        return "a plain Mamba2 model"

    @staticmethod
    def prepare(model: Mamba2LM, calibration: Any, placement: Placement) -> dict[str, torch.Tensor]:
        """What each map sees on the exact path for the calibration sequences (`calibration_inputs`)."""
        if "inject" in (placement.on_tiles or ()):
            raise InputError(f"on_tiles = {','.join(placement.on_tiles)!r} on a plain Mamba2 model: it has no "
                             "injection; expected in_proj, out_proj or 'none'")
        return calibration_inputs(model, SSMOnTiles.calibration_tokens(model, calibration))

    @staticmethod
    def exact(model: Mamba2LM, inputs: torch.Tensor, placement: Placement) -> Run:
        with torch.no_grad():
            z = model.hidden(inputs)
            return Run(model.head(z), z, one_pass(z), None, None)

    @staticmethod
    def timing(profile: DeviceProfile, placement: Placement) -> str:
        return "every map's tile products once per token (one pass); each map " + machine_words(profile,
                                                                                               placement.modules)

    @staticmethod
    def describe(model: Mamba2LM, placement: Placement) -> str:
        tiles = SSMOnTiles.tile_words(placement)
        return (f"hybrid Mamba2: {tiles or 'no map'} on optical tiles; embedding, norms, conv, scan, head digital; "
                "one pass per token")

    @staticmethod
    def attributes(model: Mamba2LM, placement: Placement) -> dict[str, Any]:
        """Dataset attributes beyond the placement's: the maps on tiles; implicit 0 (one pass: the summary's
        terms say so)."""
        return {"maps_on_tiles": ", ".join(on_tiles(model, placement)), "implicit": 0}

    def run(self, inputs: torch.Tensor, seed: int, *, samples: Any = None, extras: tuple[Any, ...] = ()) -> Run:
        """Load and calibrate every map with `seed`, then one pass of all sequences (ids `samples`, default
        0 ... B - 1, which key their noise); `extras`: noise injection's parts (PlacedModel.run)."""
        key, placed = seed_key(seed), self._load(seed)
        tokens = self.model.check_tokens(inputs)
        ids = sequence_ids(samples, tokens.shape[0])
        with torch.no_grad(), placed.keyed(key.fold(keys.Stream.RUN), ids, tokens.shape[1], extras,
                                           key.fold(keys.Stream.SNR)) as keyed:
            keyed.one_pass(tokens.shape[1])
            z = keyed.model.hidden(tokens)
            logits = keyed.model.head(z)
        solve = one_pass(z)
        return Run(logits, z, solve, placed.activity(solve.iterations), None)
