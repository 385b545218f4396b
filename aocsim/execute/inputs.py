"""Checks of what a placed model is run on: a DEQ's inputs [B, input_size], a sequence model's token
ids [B, L] and its sequences' ids, and their targets; one-line InputErrors naming the argument."""

from __future__ import annotations

from typing import Any

import torch

from aocsim.errors import InputError


def _shape(value: Any) -> object:
    return tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__


def check_targets(targets: Any, shape: tuple[int, ...], classes: int) -> torch.Tensor | None:
    """Integer class ids of `shape` in [0, classes), or None."""
    if targets is None:
        return None
    if not isinstance(targets, torch.Tensor) or tuple(targets.shape) != shape or targets.is_floating_point():
        raise InputError(f"targets has shape {_shape(targets)}; expected an integer tensor {list(shape)} "
                         "(one class per input)")
    if bool((targets < 0).any()) or bool((targets >= classes).any()):
        raise InputError(f"targets has values outside [0, {classes}); expected class ids of the model's output")
    return targets


def check_deq_inputs(model: Any, inputs: Any, targets: Any = None, name: str = "inputs"
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A DEQ's inputs [B >= 1, input_size] as finite floats in the model's dtype, and its targets [B] (class
    ids; a regression's values for a model with one output)."""
    k = model.config.input_size
    if not isinstance(inputs, torch.Tensor) or inputs.ndim != 2 or inputs.shape[1] != k:
        raise InputError(f"{name} has shape {_shape(inputs)}; expected a tensor [B, {k}] (the model's input_size = {k})")
    if inputs.shape[0] == 0:
        raise InputError(f"{name} has shape {tuple(inputs.shape)}; expected at least one sample")
    if not inputs.is_floating_point() or not bool(torch.isfinite(inputs).all()):
        raise InputError(f"{name} contains non-finite or non-float values; expected finite floats")
    if model.config.output_size == 1:  # a regression (one output): its targets are values
        return inputs.to(dtype=model.weight.dtype), check_values(targets, inputs.shape[0])
    y = check_targets(targets, (inputs.shape[0],), model.config.output_size)
    return inputs.to(dtype=model.weight.dtype), y


def check_values(targets: Any, batch: int) -> torch.Tensor | None:
    """A regression's finite float targets [B] (or [B, 1]) as float64 [B], or None."""
    if targets is None:
        return None
    if (not isinstance(targets, torch.Tensor) or not targets.is_floating_point()
            or tuple(targets.shape) not in ((batch,), (batch, 1))):
        raise InputError(f"targets has shape {_shape(targets)}; expected a float tensor [{batch}] or [{batch}, 1] "
                         "(one value per input: the model is a regression)")
    if not bool(torch.isfinite(targets).all()):
        raise InputError("targets contains non-finite values; expected finite floats")
    return targets.reshape(batch).double()


def check_token_inputs(model: Any, tokens: Any, targets: Any = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A sequence model's token ids [B, L] (the model's own check) and its targets [B, L]."""
    x = model.check_tokens(tokens)
    return x, check_targets(targets, tuple(x.shape), model.config.vocab_size)


def sequence_ids(sequences: torch.Tensor | None, batch: int) -> torch.Tensor:
    """The ids [B] of a run's sequences (None: 0 ... B - 1), checked."""
    if sequences is None:
        return torch.arange(batch)
    if (not isinstance(sequences, torch.Tensor) or sequences.dtype not in (torch.int64, torch.int32)
            or tuple(sequences.shape) != (batch,) or bool((sequences < 0).any())):
        raise InputError(f"sequences = {sequences!r}; expected None or an integer tensor [{batch}] of ids >= 0")
    return sequences
