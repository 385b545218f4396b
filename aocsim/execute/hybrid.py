"""An implicit SSM on a virtual AOC as a hybrid: its linear maps on optical tiles, the rest digital
(`HybridSSM`).

The model (aocsim/nn/implicit_ssm.py) iterates z = f(z) per token (an explicit baseline,
`implicit=False`, makes one pass of f from z = 0: one pass on the device too, priced as one); inside f, every linear map
(the injection W_u, and each block's input and output projections) is a matrix product. On the
device, the maps the placement names (`on_tiles`, default all) become calibrated `DeviceLinear`s
(aocsim/execute/device_linear.py): the matrix programmed onto a grid of optical tiles, each call a
tile pass with its own noise. Everything else stays digital in float64: RMSNorm, exp, the causal
conv and the selective scan, the scan state between tokens, and the head; SiLU and softplus too,
or on modelled analog circuits (`elementwise="analog"`, aocsim/execute/elementwise.py). Both
execution modes run on the device (aocsim/execute/ssm_device.py).

What each map sees on the exact path for the calibration sequences is computed once for all chips
(`prepare`). Per chip: each map's program is fitted on probe loads of that chip (`fit_programs`).
Per seed: every map loaded and calibrated, then the run, its noise keyed by the seed, sequence and
token. A token's status is "converged" when its relative residual
||f(z) - z|| / ||f(z)|| is at most the placement's `rtol`, else "max_iter". Results on the bundled
models: docs/DEVICE_RUNS.md.

Noise set by an SNR and the EMA readout are not this kind's: they wrap it (aocsim/execute/noise_injection.py),
through its noise sites (`noise_sites`, `run`'s `extras`) and its own noise measured in dB (`noise_db`).
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping

import numpy as np
import torch

from aocsim.errors import InputError
from aocsim.execute.placed import PlacedModel
from aocsim.execute.inputs import check_token_inputs
from aocsim.execute.placement import HYBRID, Placement, ssm_cap, ssm_cap_words
from aocsim.execute.run import Run, seed_key
from aocsim.execute.snr_mapping import device_snr_db
from aocsim.execute.seed_stack import stack_seeds, stackable
from aocsim.execute.ssm_device import (PlacedSSM, calibration_inputs, fit_programs, fit_programs_population, on_tiles,
                                       place_ssm, sized, tiled_shapes)
from aocsim.hardware.engine import keys
from aocsim.hardware.engine.machine import machine_words
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.nn.implicit_ssm import ImplicitSSM
from aocsim.solve.result import SolveResult, SolveStatus

# Relative residual per token on the exact path: far below any device effect in float64; in float32
# the bundled cards' eval_tol (float32 carries about 7 digits).
EXACT_TOL = {torch.float64: 1e-11, torch.float32: 1e-5}


def hold_last(values: np.ndarray) -> np.ndarray:
    """[iteration, run]: each run's NaNs after its last number replaced by that number (a stopped
    run stays at its final residual)."""
    seen = ~np.isnan(values)
    index = np.where(seen, np.arange(values.shape[0])[:, None], 0)
    np.maximum.accumulate(index, axis=0, out=index)
    held = values[index, np.arange(values.shape[1])[None, :]]
    return np.where(np.maximum.accumulate(seen, axis=0), held, np.nan)


def median_over_positions(trace: torch.Tensor) -> torch.Tensor:
    """[B, L, I] relative residuals per token and iteration -> [B, I]: per sequence the median over its
    tokens, each token held at its last residual once it stopped (NaN where no token has started)."""
    b, length, its = trace.shape
    held = hold_last(trace.double().numpy().reshape(b * length, its).T).T.reshape(b, length, its)
    with warnings.catch_warnings():  # iterations no token of a sequence has reached: NaN, not a warning
        warnings.simplefilter("ignore", RuntimeWarning)
        return torch.from_numpy(np.nanmedian(held, axis=1))


def per_token(out: Any, tol: float) -> SolveResult:
    """A model output's iterations and residuals per token [B, L] as a SolveResult (converged at
    most `tol`, diverged where the residual is not finite, else max_iter)."""
    status = torch.where(out.residuals <= tol, SolveStatus.CONVERGED.value, SolveStatus.MAX_ITER.value)
    status = torch.where(torch.isfinite(out.residuals), status, SolveStatus.DIVERGED.value)
    nan = torch.full_like(out.residuals, float("nan"))
    return SolveResult(out.z, status, out.iterations, nan, out.residuals, out.trace, "picard (per token)")


def _check_explicit(model: ImplicitSSM, placement: Placement) -> None:
    """What an explicit SSM (one pass of the map from z = 0) cannot take, as one-line errors before any work
    (the noise options it cannot take: aocsim/execute/noise_injection.py, through `one_pass`)."""
    if placement.on_tiles and not on_tiles(model, placement):
        raise InputError(f"on_tiles = {','.join(placement.on_tiles)!r} on an explicit SSM: its first block's input "
                         "projection multiplies RMSNorm(0) = 0 and stays digital, so no map would be on tiles; "
                         "expected another map (inject, out_proj) or 'none'")


class SSMOnTiles(PlacedModel, register=False):
    """What every kind placed by aocsim/execute/ssm_device.py shares (a base, not a kind): token inputs, the maps
    on tiles fitted once per chip (`fit_programs`) or a population's together, and loaded per seed."""

    residual = "rel_residual"
    dims = ("sample", "position")
    fitted_maps = staticmethod(tiled_shapes)

    @staticmethod
    def check_inputs(model: Any, inputs: Any, targets: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        return check_token_inputs(model, inputs, targets)

    @staticmethod
    def calibration_tokens(model: Any, calibration: Any) -> torch.Tensor:
        """The calibration sequences as token ids, or a one-line InputError (the tiles are fitted on them)."""
        if calibration is None:
            raise InputError("calibration = None; the tiles are fitted and calibrated on what each map sees for "
                             "calibration sequences, so expected token ids [B, L]")
        return model.check_tokens(calibration)

    @staticmethod
    def tile_words(placement: Placement) -> str:
        """The maps on tiles and how they are placed, in words (`describe`)."""
        tiles, how = ", ".join(placement.on_tiles), placement.tile.words()
        return tiles + (f" ({how})" if how else "")

    def __init__(self, model: Any, profile: DeviceProfile, placement: Placement,
                 prepared: dict[str, torch.Tensor]) -> None:
        placement = sized(placement, profile)  # a tile size on a profile of any size
        super().__init__(model, profile, placement, prepared)
        self.calibration = prepared
        self.programs = fit_programs(model, self.run_profile, prepared, placement)  # once per chip

    @classmethod
    def fit_population(cls, model: Any, profiles: list[DeviceProfile], prepared: dict[str, torch.Tensor],
                       placement: Placement) -> None:
        """Every point's tile programs fitted together (`fit_programs_population`), remembered for its placement."""
        fit_programs_population(model, profiles, prepared, sized(placement, profiles[0]))

    @property
    def program_error(self) -> float:
        """The largest matrix error of this chip's tile programs (their last closed-loop round)."""
        return max((p.error for p in self.programs.values()), default=0.0)

    def _load(self, seed: int) -> PlacedSSM:
        """Every map loaded and calibrated with `seed` (its weight load)."""
        return place_ssm(self.model, self.run_profile, self.calibration, self.placement,
                         generator=seed_key(seed).fold(keys.Stream.LOAD), programs=self.programs)


class HybridSSM(SSMOnTiles):
    """An implicit SSM on one chip of a device (module docstring)."""

    kind = HYBRID
    residual_units = "relative, ||f(z) - z|| / ||f(z)|| per token"
    noise_sites = ("inputs", "states")  # the states: committed per token in sequential mode

    @classmethod
    def convergence_rule(cls, rtol: str, atol: str) -> str:
        return f"relative residual ||f(z) - z|| / ||f(z)|| <= rtol {rtol} per token"

    @staticmethod
    def iteration_cap(mode: str | None) -> str:
        return ssm_cap_words(mode)

    @staticmethod
    def fits(model: Any, profile: DeviceProfile, placement: Placement) -> bool:
        return isinstance(model, ImplicitSSM)

    @staticmethod
    def one_pass(model: ImplicitSSM) -> str:
        return "" if model.config.implicit else "an explicit SSM"

    @staticmethod
    def prepare(model: ImplicitSSM, calibration: Any, placement: Placement) -> dict[str, torch.Tensor]:
        """What each map sees on the exact path for the calibration sequences (`calibration_inputs`)."""
        if not model.config.implicit:
            _check_explicit(model, placement)
        tokens = SSMOnTiles.calibration_tokens(model, calibration)
        return {**calibration_inputs(model, tokens), "tokens": tokens}  # the tokens: `noise_db` measures on them

    @staticmethod
    def exact(model: ImplicitSSM, inputs: torch.Tensor, placement: Placement) -> Run:
        tol = EXACT_TOL.get(model.head.weight.dtype, 1e-5)
        length = inputs.shape[1]
        cap = 300 if placement.mode == "sequential" else 3 * length + 100
        with torch.no_grad():
            out = model(inputs, mode=placement.mode, tol=tol, max_iter=cap, trace=True)
        return Run(out.logits, out.z, per_token(out, tol), None, median_over_positions(out.trace))

    @staticmethod
    def timing(profile: DeviceProfile, placement: Placement) -> str:
        """What the hardware time counts."""
        return ("the injection's tile products once per token, the projections' every iteration (an explicit "
                "model's once); each map "
                + machine_words(profile, placement.modules))

    @staticmethod
    def describe(model: ImplicitSSM, placement: Placement) -> str:
        tiles = SSMOnTiles.tile_words(placement)
        analog = "; SiLU and softplus analog" if placement.elementwise == "analog" else ""
        once = "" if model.config.implicit else "; explicit: one pass from z = 0 (the first block's in_proj, reading 0, digital)"
        return (f"hybrid: {tiles or 'no map'} on optical tiles{analog}; other linear maps, norms, conv, scan, "
                f"head digital{once}")

    @staticmethod
    def untrusted_cause(attrs: Mapping[str, Any]) -> str:
        """No map on tiles (the abstract noise model): the noise the snr options set; else the tiles'."""
        if attrs.get("maps_on_tiles") == "":
            return ("the noise the snr_* options set (no map runs on tiles: the abstract noise model); "
                    "a higher snr_db or snr_states_db lowers it")
        return PlacedModel.untrusted_cause(attrs)

    @staticmethod
    def attributes(model: ImplicitSSM, placement: Placement) -> dict[str, Any]:
        """Dataset attributes beyond the placement's: the exact path's tolerance, the maps on tiles."""
        maps = ", ".join(on_tiles(model, placement))
        return {"exact_tol": EXACT_TOL.get(model.head.weight.dtype, 1e-5), "maps_on_tiles": maps,
                "implicit": int(model.config.implicit)}

    def noise_db(self, profile: DeviceProfile, placement: Placement, site: str) -> float:
        """The SNR in dB of this chip's noise at `site` on `profile` (aocsim/execute/snr_mapping.py), measured on
        the calibration sequences with this chip's programs."""
        return device_snr_db(self.model, profile, self.calibration, placement, self.calibration["tokens"], site,
                             programs=self.programs)

    def _options(self, inputs: torch.Tensor) -> dict[str, Any]:
        s = self.placement
        cap = s.max_iter or ssm_cap(s.mode, inputs.shape[1])
        return {"mode": s.mode, "tau": s.damping, "tol": s.rtol, "max_iter": cap, "trace": True}

    def _result(self, out: Any, placed: PlacedSSM) -> Run:
        # k iterations evaluate the map k + 1 times (the last evaluation shows the residual that stops them);
        # an explicit model makes one pass
        passes = out.iterations + 1 if self.model.config.implicit else torch.ones_like(out.iterations)
        return Run(out.logits, out.z, per_token(out, self.placement.rtol), placed.activity(passes),
                   median_over_positions(out.trace))

    def run(self, inputs: torch.Tensor, seed: int, *, samples: Any = None, extras: tuple[Any, ...] = ()) -> Run:
        """Load and calibrate every map with `seed`, then run all sequences (ids `samples`, default
        0 ... B - 1, which key their noise) in the placement's mode; `extras`: noise injection's parts
        (PlacedModel.run)."""
        key, placed = seed_key(seed), self._load(seed)
        out = placed(inputs, generator=key.fold(keys.Stream.RUN), sequences=samples, extras=extras,
                     extras_key=key.fold(keys.Stream.SNR), **self._options(inputs))
        return self._result(out, placed)

    @staticmethod
    def stacks(placement: Placement) -> bool:
        """Whether `run_seeds` runs a chip's seeds as one batch (`seed_stack.stackable`)."""
        return stackable(placement)

    def run_seeds(self, inputs: torch.Tensor, seeds: list[int]) -> list[Run]:
        """`run` for every seed: their weight loads stacked into one batch (aocsim/execute/seed_stack.py;
        the same results to the rounding of a larger batch) where the placement allows, else one by one."""
        if len(seeds) < 2 or not self.stacks(self.placement):
            return [self.run(inputs, seed) for seed in seeds]
        return self._stacked([(self, seed) for seed in seeds], inputs)

    def _stacked(self, runs: list[tuple["HybridSSM", int]], inputs: torch.Tensor) -> list[Run]:
        """Every (placed point, seed) of `runs` loaded, their loads stacked into one batch, run once."""
        loaded = [placed._load(seed) for placed, seed in runs]
        stack = stack_seeds(self.model, loaded)
        outs = stack(inputs, generator=[seed_key(seed).fold(keys.Stream.RUN) for _, seed in runs],
                     **self._options(inputs))
        return [self._result(out, own) for out, own in zip(outs, loaded)]  # each its own activity (program widths)

    @classmethod
    def run_population(cls, placed: list[PlacedModel], inputs: torch.Tensor, seeds: list[list[int]]
                       ) -> list[list[Run]]:
        """Every point's seeds as one batch (`_stacked`: each row through its own point's load) where the points
        are this kind unwrapped and the placement stacks, one batch per grid of tiles (a point's programs skip
        the input positions its chip measured dead at its SLM bits, which can take a program past a tile
        boundary); else point by point."""
        own = [p for p in placed if type(p) is cls]
        if len(own) < len(placed) or not cls.stacks(placed[0].placement):
            return super().run_population(placed, inputs, seeds)
        shape = [tuple((n, p.weight.shape[0], -(-p.weight.shape[1] // p.tile_size)) for n, p in point.programs.items())
                 for point in own]
        out: list[list[Run]] = [[] for _ in own]
        for group in dict.fromkeys(shape):
            members = [i for i in range(len(own)) if shape[i] == group]
            every = [(own[i], seed) for i in members for seed in seeds[i]]
            first = own[members[0]]
            runs = first._stacked(every, inputs) if len(every) > 1 else [first.run(inputs, every[0][1])]
            for i in members:
                out[i], runs = runs[:len(seeds[i])], runs[len(seeds[i]):]
        return out
