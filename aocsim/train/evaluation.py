"""The metrics a recipe writes into its model card, and `aocsim evaluate` reports: a DEQ classifier's
accuracy and convergence (`evaluate_deq`; a regression's mean squared error, `evaluate_regression`), a
twin DEQ's outputs with its loop cut (`twin_ablations`), a state-tracking model's per-token accuracy by
position at multiples of its training length in each mode (`evaluate_lengths`), a language model's
held-out bits per character overall and by position in each mode (`evaluate_bits`). Exact path only."""

from __future__ import annotations

import math
from typing import Any, Protocol

import torch

from aocsim.nn.deq import DEQ
from aocsim.nn.implicit_ssm import ImplicitSSM, SSMConfig
from aocsim.nn.mamba2_lm import Mamba2LM
from aocsim.nn.twin_deq import TwinDEQ
from aocsim.tasks.groups import group, word_problems


class EvaluationSettings(Protocol):
    """What `evaluate_lengths` reads of a recipe (`aocsim.train.state_tracking.StateTrackingRecipe`)."""

    task: str
    implicit: bool
    train_length: int
    tau: float
    eval_tol: float
    eval_max_iter: int
    eval_batch: int
    eval_prob: float
    eval_factors: tuple[int, ...]


def evaluate_deq(model: DEQ, x: torch.Tensor, y: torch.Tensor, **solve_options: Any) -> dict[str, float]:
    """Accuracy and convergence statistics of a DEQ classifier on (x, y).

    Returns:
        accuracy, converged_fraction, iterations_mean, iterations_max and
        residual_max (largest ||f(z) - z||_2 of the returned fixed points).
    """
    with torch.no_grad():
        out = model(x, **solve_options)
    it = out.solve.iterations.double()
    return {
        "accuracy": float((out.logits.argmax(1).cpu() == y.cpu()).double().mean()),
        "converged_fraction": float(out.solve.converged.double().mean()),
        "iterations_mean": float(it.mean()),
        "iterations_max": int(it.max()),
        "residual_max": float(out.solve.abs_residual.max()),
    }


def _as_model(model: ImplicitSSM | Mamba2LM | tuple[dict, dict]) -> ImplicitSSM | Mamba2LM:
    """`model`, or the model rebuilt from (config, weights) as shipped to a worker process."""
    if not isinstance(model, tuple):
        return model
    config, state = model
    rebuilt = ImplicitSSM(SSMConfig(**config)).to(next(iter(state.values())).dtype)
    rebuilt.load_state_dict(state)
    return rebuilt.eval()


def _shipped(model: ImplicitSSM, workers: int) -> ImplicitSSM | tuple[dict, dict]:
    """What the pieces of work carry: the model itself on one worker, else its config and weights."""
    if workers <= 1:
        return model
    return model.config.to_dict(), {k: v.detach().cpu() for k, v in model.state_dict().items()}


def evaluate_regression(model: DEQ | TwinDEQ, x: torch.Tensor, y: torch.Tensor, **solve_options: Any
                        ) -> dict[str, float]:
    """Mean squared error and convergence of a DEQ regression on (x, y [B, outputs]); keys as `evaluate_deq`
    with `mse` instead of `accuracy`."""
    with torch.no_grad():
        out = model(x, **solve_options)
    it = out.solve.iterations.double()
    return {
        "mse": float(((out.logits.cpu() - y.cpu()) ** 2).mean()),
        "converged_fraction": float(out.solve.converged.double().mean()),
        "iterations_mean": float(it.mean()),
        "iterations_max": int(it.max()),
        "residual_max": float(out.solve.abs_residual.max()),
    }


def twin_ablations(model: TwinDEQ, x: torch.Tensor, **solve_options: Any) -> dict[str, torch.Tensor]:
    """A twin DEQ's outputs [B, outputs] with its loop cut, on the nominal pipeline.

    "without_feedback": beta = 0, the optical path switched off: z* = (clip(U x + b) + k0) / (1 - alpha),
    so with a split the readout channels see only their bias (chance accuracy). "zero_weight": W = 0 on
    the SLM; the SLM's darkness (an "off" pixel's light, docs/PHYSICS.md section 2 step 4) still
    couples every input channel into every output, equally.
    """
    with torch.no_grad():
        zero = torch.zeros_like(model.weight)
        return {"without_feedback": model(x, loop=model.loop(beta=0.0), **solve_options).logits,
                "zero_weight": model(x, loop=model.loop(weight=zero), **solve_options).logits}


def _run(model: ImplicitSSM | Mamba2LM | tuple[dict, dict], tokens: torch.Tensor, mode: str, tau: float, tol: float,
         max_iter: int, lookahead: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logits, iterations, residuals) of `tokens` in `mode`; `model` may come as (config, weights). A plain
    Mamba2 LM has no fixed point and no modes: one pass, 0 iterations and residuals."""
    m = _as_model(model)
    with torch.no_grad():
        if isinstance(m, Mamba2LM):
            logits = m(tokens)
            return logits, torch.zeros(tokens.shape, dtype=torch.int64), logits.new_zeros(tokens.shape)
        res = m(tokens, mode=mode, tau=tau, tol=tol, max_iter=max_iter, lookahead=lookahead)
    return res.logits, res.iterations, res.residuals


def _solve_part(model: ImplicitSSM | tuple[dict, dict], tokens: torch.Tensor, mode: str, tau: float, tol: float,
                max_iter: int, lookahead: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(predictions, iterations, residuals) of `tokens` in `mode`; `model` may come as (config, weights)."""
    logits, iterations, residuals = _run(model, tokens, mode, tau, tol, max_iter, lookahead)
    return logits.argmax(-1), iterations, residuals


# Sequences per solve in evaluate_lengths, fixed so that the figures do not depend on the number of
# workers: a simultaneous solve freezes the prefix on which its whole batch has converged, and the
# rounding of a batched matrix product can depend on the batch size. 64 rows are faster than 128 in
# simultaneous mode (a5-implicit at 16L, one core: 36-42 s against 38-48 s per 128 sequences);
# sequential mode pays per call, not per row (64 rows: 23-25 s, 128: 17-19 s per 256 sequences).
ROWS = {"simultaneous": 64, "sequential": 128}
# Simultaneous mode iterates this many tokens beyond the converged prefix (ImplicitSSM._simultaneous):
# a5-implicit at 16L, 64 sequences, one core: 22.3 s -> 8.3 s, iterations per token 186.847 both ways
# (1.4 % of tokens one iteration apart), the same predictions; 32 tokens moved parity-implicit's counts
# by up to 28 iterations at 8L (its convergence front moves faster), 64 by at most one.
LOOKAHEAD = 64


def evaluate_lengths(model: ImplicitSSM, r: EvaluationSettings, *, factors: tuple[int, ...] | None = None,
                     modes: tuple[str, ...] = ("simultaneous", "sequential"), batch: int | None = None,
                     identity_prob: float | None = None, seed: int = 12345, workers: int = 1,
                     progress: bool = False, desc: str = "evaluate") -> dict[str, Any]:
    """Per-token accuracy (mean and per position) at multiples of the training length, in each mode.

    Fresh sequences (numpy seed `seed + factor`), all of a length in one batch. `factors` default
    to the recipe's eval_factors, `identity_prob` to its eval_prob (1 / order: uniform tokens).
    The sequences of each length and mode are solved in pieces of ROWS[mode] sequences on `workers`
    processes (`aocsim.parallel`, one torch thread each); the figures do not depend on `workers`.
    Simultaneous mode iterates LOOKAHEAD tokens beyond the converged prefix. `progress`: a bar
    over the pieces of work.
    """
    from aocsim.parallel import run_parts, split_rows
    from aocsim.progress import bar

    g = group(r.task)
    p_id = r.eval_prob if identity_prob is None else identity_prob
    if not r.implicit:
        workers = 1  # one pass per sequence: less work than starting a process (about 2 s)
    shipped = _shipped(model, workers)
    jobs, where, data = [], [], {}
    for factor in factors or r.eval_factors:
        length = factor * r.train_length
        tokens, targets = word_problems(g, batch or r.eval_batch, length, identity_prob=p_id,
                                        generator=seed + factor)
        data[factor] = (length, targets)
        for mode in modes:
            # Simultaneous mode moves state along the sequence about one token per iteration,
            # so its cap grows with the length; sequential mode's cap is per token.
            cap = max(r.eval_max_iter, 3 * length) if mode == "simultaneous" else r.eval_max_iter
            n = tokens.shape[0]
            lookahead = LOOKAHEAD if mode == "simultaneous" else None
            for rows in split_rows(n, -(-n // ROWS[mode])):
                jobs.append((shipped, tokens[rows], mode, r.tau, r.eval_tol, cap, lookahead))
                where.append((factor, mode, rows.start))
    # The longest first, by a cost model fitted to a5-implicit on one core: simultaneous work grows
    # as rows x L x (L + 30) (its iterations grow with L), sequential as rows x L x 44.
    def cost(job: tuple) -> int:
        rows, length = job[1].shape
        return rows * length * ((length + 30) if job[2] == "simultaneous" else 44)

    order = sorted(range(len(jobs)), key=lambda i: -cost(jobs[i]))
    pieces: dict[tuple[int, str], dict[int, tuple]] = {}
    done = run_parts(_solve_part, [jobs[i] for i in order], workers)  # the longest first
    for i, result in bar(done, desc=desc, total=len(jobs), enabled=progress):
        factor, mode, start = where[order[i]]
        pieces.setdefault((factor, mode), {})[start] = result
    out: dict[str, Any] = {}
    for factor, (length, targets) in data.items():
        entry: dict[str, Any] = {"length": length, "identity_prob": p_id}
        preds = {}
        for mode in modes:
            parts = [pieces[(factor, mode)][s] for s in sorted(pieces[(factor, mode)])]
            preds[mode], iterations, residuals = (torch.cat(x) for x in zip(*parts))
            correct = (preds[mode] == targets).double()
            entry[mode] = {"accuracy": float(correct.mean()),
                           "accuracy_by_position": [round(float(a), 4) for a in correct.mean(0)],
                           "iterations_per_token": float(iterations.double().mean()),
                           "converged_fraction": float((residuals <= r.eval_tol).double().mean())
                           if r.implicit else 1.0}
        if len(modes) == 2:
            entry["mode_agreement"] = float((preds[modes[0]] == preds[modes[1]]).double().mean())
        out[f"{factor}L"] = entry
    return out




class LanguageEvaluationSettings(Protocol):
    """What `evaluate_bits` reads of a recipe (`aocsim.train.language.LanguageRecipe`)."""

    implicit: bool
    tau: float
    eval_tol: float
    eval_max_iter: int


def bits_per_character(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """-log2 p(target) per position, float64 [B, L], from logits [B, L, V] and target ids [B, L].

    The softmax in float64; a model that gives every class the same logit scores log2(V) everywhere.
    """
    logp = torch.log_softmax(logits.double(), dim=-1).gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)
    return -logp / math.log(2.0)


def _bits_part(model: ImplicitSSM | Mamba2LM | tuple[dict, dict], tokens: torch.Tensor, targets: torch.Tensor, mode: str,
               tau: float, tol: float, max_iter: int, lookahead: int | None = None) -> tuple[torch.Tensor, ...]:
    """(bits, predictions, iterations, residuals) per position of `tokens` in `mode`."""
    logits, iterations, residuals = _run(model, tokens, mode, tau, tol, max_iter, lookahead)
    return bits_per_character(logits, targets), logits.argmax(-1), iterations, residuals


def evaluate_bits(model: ImplicitSSM, r: LanguageEvaluationSettings, inputs: torch.Tensor, targets: torch.Tensor, *,
                  modes: tuple[str, ...] | None = None, workers: int = 1, progress: bool = False,
                  desc: str = "evaluate") -> dict[str, Any]:
    """Bits per character of next-character prediction on windows (inputs, targets) [W, L], per mode.

    For each mode (default: simultaneous and sequential for an implicit model, simultaneous alone
    for an explicit one, whose modes compute the same function): `bits_per_character` (the mean
    over every window and position), `bits_by_position` (the mean over windows at each position;
    position t has seen t + 1 characters), `iterations_per_token` and `converged_fraction`; with
    two modes, `mode_agreement` (fraction of positions with the same most likely character) and
    `mode_bits_gap` (the difference of the two means). Solved in pieces of ROWS[mode] windows
    on `workers` processes with the solver settings of `r` (as `evaluate_lengths`).
    """
    from aocsim.parallel import run_parts, split_rows
    from aocsim.progress import bar

    modes = modes or (("simultaneous", "sequential") if r.implicit else ("simultaneous",))
    shipped = _shipped(model, workers if r.implicit else 1)
    length = inputs.shape[1]
    jobs, where = [], []
    for mode in modes:
        cap = max(r.eval_max_iter, 3 * length) if mode == "simultaneous" else r.eval_max_iter
        lookahead = LOOKAHEAD if mode == "simultaneous" else None
        for rows in split_rows(len(inputs), -(-len(inputs) // ROWS[mode])):
            jobs.append((shipped, inputs[rows], targets[rows], mode, r.tau, r.eval_tol, cap, lookahead))
            where.append((mode, rows.start))
    pieces: dict[str, dict[int, tuple]] = {mode: {} for mode in modes}
    done = run_parts(_bits_part, jobs, workers if r.implicit else 1)
    for i, result in bar(done, desc=desc, total=len(jobs), enabled=progress):
        pieces[where[i][0]][where[i][1]] = result
    out: dict[str, Any] = {"length": length, "windows": len(inputs), "characters": targets.numel()}
    preds = {}
    for mode in modes:
        bits, preds[mode], iterations, residuals = (torch.cat(x) for x in zip(*(pieces[mode][s]
                                                                                for s in sorted(pieces[mode]))))
        out[mode] = {"bits_per_character": float(bits.mean()),
                     "bits_by_position": [round(float(b), 4) for b in bits.mean(0)],
                     "iterations_per_token": float(iterations.double().mean()),
                     "converged_fraction": float((residuals <= r.eval_tol).double().mean()) if r.implicit else 1.0}
    if len(modes) == 2:
        out["mode_agreement"] = float((preds[modes[0]] == preds[modes[1]]).double().mean())
        out["mode_bits_gap"] = out[modes[1]]["bits_per_character"] - out[modes[0]]["bits_per_character"]
    return out
