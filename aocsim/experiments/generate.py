"""Text from a character-level language model: the next character drawn from the softmax, one at a time.

The sampling loop (`sample`) sees the model only as a callable `next_logits(tokens) -> logits`: the
token ids so far, int64 [T], to the logits of the next token [V]. That callable is the hook for
other executors: the exact path is `ExactNextLogits` (the model's sequential mode, incremental: each
call solves only the tokens it has not seen, with the previous tokens' states committed; for the plain
Mamba2 LM, `RecurrentNextLogits`, its recurrent form with the same bookkeeping); a device
path is another callable of the same form (for example a placed model run on the prefix), passed to
`generate(..., next_logits=...)`.

Characters of the prompt outside the model's vocabulary map to its `unknown_id` (`Generation.unknown`
lists them); the unknown id is decoded as U+FFFD.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

import torch
from torch import nn

from aocsim._checks import integer, real, short
from aocsim.errors import InputError
from aocsim.nn.mamba2_lm import Mamba2LM
from aocsim.nn.ssm_token import announce
from aocsim.tasks.corpus import Vocabulary
from aocsim.train.language import card_vocabulary

NextLogits = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Generation:
    """prompt and the generated `text` (without the prompt); `tokens` int64 [length] the generated ids;
    `unknown` the prompt's characters outside the vocabulary; `iterations_per_token` the mean fixed-point
    iterations of the exact path's solves (None for another executor)."""

    prompt: str
    text: str
    tokens: torch.Tensor
    unknown: list[str]
    iterations_per_token: float | None = None


def sample(next_logits: NextLogits, prompt: torch.Tensor, length: int, *, temperature: float = 1.0,
           generator: torch.Generator) -> torch.Tensor:
    """`length` token ids after `prompt` (int64 [T], T >= 1), each drawn from softmax(logits / temperature).

    temperature 0: the most likely token (greedy). Draws come from `generator` alone: the same generator
    state and the same logits give the same tokens.
    """
    tokens = prompt.long().reshape(-1)
    for _ in range(length):
        logits = next_logits(tokens).double().reshape(-1)
        if temperature == 0:
            nxt = logits.argmax().reshape(1)
        else:
            probs = torch.softmax(logits / temperature, dim=-1).cpu()
            nxt = torch.multinomial(probs, 1, generator=generator)
        tokens = torch.cat([tokens, nxt.to(tokens.device)])
    return tokens[len(tokens) - length:]


class ExactNextLogits:
    """The exact path as `next_logits`: the model's sequential mode, one token at a time.

    A call with tokens that extend those of the previous call solves only the new tokens (the SSM
    states of the earlier ones are kept); any other prefix starts over. The logits equal those of
    `model(tokens, mode="sequential")` at the last position, with the same solver settings.
    """

    def __init__(self, model: Any, *, tau: float, tol: float, max_iter: int) -> None:
        self.model, self.options = model, {"tau": tau, "tol": tol, "max_iter": max_iter}
        self.on_pass: Any = None  # a placed model's observer of passes (`DeviceNextLogits`)
        self.solve_token: Any = partial(type(model).solve_token, model)  # or a placed model's token loop's
        self.seen = torch.zeros(0, dtype=torch.long)
        self.caches: list[Any] = []
        self.z: torch.Tensor | None = None
        self.iterations: list[int] = []

    @torch.no_grad()
    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        model, n = self.model, len(self.seen)
        if n == 0 or len(tokens) < n or not torch.equal(tokens[:n].cpu(), self.seen):
            n, self.z = 0, None
            like = model.head.weight
            self.caches = [block.init_cache(1, like) for block in model.blocks]
        for t in range(n, len(tokens)):
            announce(self.on_pass, t, t + 1, 0)  # the injection's pass (a placed model keys its noise by it)
            u_t = model.injection(tokens[t].reshape(1, 1).to(model.head.weight.device))[:, 0]
            self.z, self.caches, its, _, _ = self.solve_token(u_t, self.caches, t, on_pass=self.on_pass, **self.options)
            self.iterations.append(int(its[0]))
        self.seen = tokens.detach().cpu().clone()
        if self.z is None:
            raise InputError("next_logits called with no tokens; expected at least one")
        return model.head(self.z)[0]


class RecurrentNextLogits:
    """A plain Mamba2 LM (aocsim/nn/mamba2_lm.py) as `next_logits`: its recurrent form (`Mamba2LM.step`),
    token by token, with `ExactNextLogits`' bookkeeping (new tokens only when the prefix is extended)."""

    def __init__(self, model: Mamba2LM) -> None:
        self.model, self.seen, self.caches, self.logits = model, torch.zeros(0, dtype=torch.long), [], None

    @torch.no_grad()
    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        n = len(self.seen)
        if n == 0 or len(tokens) < n or not torch.equal(tokens[:n].cpu(), self.seen):
            n, self.logits, self.caches = 0, None, self.model.init_caches(1)
        for t in range(n, len(tokens)):
            self.logits, self.caches = self.model.step(tokens[t].reshape(1), self.caches)
        self.seen = tokens.detach().cpu().clone()
        if self.logits is None:
            raise InputError("next_logits called with no tokens; expected at least one")
        return self.logits[0]


class DeviceNextLogits(ExactNextLogits):
    """A language model on one chip of a device as `next_logits`: placed as a hybrid (aocsim/execute/
    hybrid.py; `placement` as in `aocsim.compare`), loaded with `seed`'s draws, and run token by token
    in sequential mode on the device, its noise keyed by the seed, the sequence (id 0) and the
    position, as `compare` keys it; the incremental bookkeeping is the exact path's. The device's
    per-token tolerance and cap are the placement's (`rtol`, `max_iter`, default 0.1 and 30)."""

    def __init__(self, model: Any, device: Any, *, max_length: int, chip: int = 0, seed: int = 0,
                 placement: Any = None, calibration: Any = None) -> None:
        from aocsim.execute import place
        from aocsim.execute.placement import as_placement
        from aocsim.execute.run import seed_key
        from aocsim.execute.ssm_device import place_ssm
        from aocsim.experiments.workloads import default_calibration
        from aocsim.hardware.engine import keys

        if isinstance(model, Mamba2LM):  # placed as a hybrid Mamba2 (one pass), not token by token as here
            raise InputError(f"{(getattr(model, 'card', None) or {}).get('name', 'this model')} is a plain Mamba2 "
                             "model: generation on a device takes implicit SSMs (token by token in sequential mode); "
                             "generate it without a device, or run it on one with aocsim compare")
        noise = as_placement(placement).noise
        if noise.injects():  # its parts key by a whole run's sequences and passes, not one growing sequence
            given = ", ".join(f"{name} = {value!r}" for name, value in noise.given().items())
            raise InputError(f"placement sets {given}; generation on a device runs the device's own noise token by "
                             "token, so expected no snr_db, snr_states_db, ema_alpha or snr_convergence 'batch'")
        hybrid = place(model, device, placement, chip=chip,
                       calibration=default_calibration(model) if calibration is None else calibration)
        key, s = seed_key(seed), hybrid.placement
        placed = place_ssm(hybrid.model, hybrid.run_profile, hybrid.calibration, s,
                           generator=key.fold(keys.Stream.LOAD), programs=hybrid.programs)
        self._keyed = placed.keyed(key.fold(keys.Stream.RUN), torch.zeros(1, dtype=torch.long), max_length)
        run = self._keyed.__enter__()
        super().__init__(run.model, tau=s.damping, tol=s.rtol, max_iter=s.max_iter or 30)
        self.on_pass, self.solve_token = run.on_pass, partial(run.loop.token, run.model)


def check_request(model: nn.Module, prompt: str, length: int, *, seed: int = 0, temperature: float = 1.0
                  ) -> Vocabulary:
    """The checks of `generate`'s arguments (one-line InputErrors); returns the model's vocabulary."""
    vocab = card_vocabulary(model)
    if not isinstance(prompt, str) or not prompt:
        raise InputError(f"prompt = {short(prompt)}; expected a string of at least one character")
    integer(length, "length", minimum=1)
    integer(seed, "seed", minimum=0)
    real(temperature, "temperature", low=0.0)
    return vocab


def generate(model: nn.Module, prompt: str, length: int, *, seed: int = 0, temperature: float = 1.0,
             next_logits: NextLogits | None = None) -> Generation:
    """`length` characters after `prompt` from a language model (a loaded `charlm-*` model).

    Args:
        model: a model whose card has task "language" (its vocabulary and solver settings).
        prompt: at least one character; characters outside the vocabulary become its unknown id.
        length: characters to generate, >= 1.
        seed: seed of the torch.Generator the characters are drawn with.
        temperature: softmax temperature, >= 0 (0: greedy).
        next_logits: the executor (module docstring); default the exact path, `ExactNextLogits`.

    Example: `generate(load_model("charlm-implicit"), "The ", 80, seed=1).text`.
    """
    vocab = check_request(model, prompt, length, seed=seed, temperature=temperature)
    exact = None
    if next_logits is None and isinstance(model, Mamba2LM):
        next_logits = RecurrentNextLogits(model)
    elif next_logits is None:
        training = model.card["training"]
        exact = next_logits = ExactNextLogits(model, tau=training["tau"], tol=training["eval_tol"],
                                              max_iter=training["eval_max_iter"])
    tokens = sample(next_logits, torch.from_numpy(vocab.encode(prompt)), length, temperature=temperature,
                    generator=torch.Generator().manual_seed(seed))
    its = exact.iterations if exact is not None and model.config.implicit else None
    return Generation(prompt, vocab.decode(tokens), tokens, vocab.unknown_characters(prompt),
                      sum(its) / len(its) if its else None)
