"""Model kinds that `aocsim.load_model` can rebuild from a model card: one builder per kind, registered
explicitly in `KINDS` (adding a kind is one function and one line here)."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from aocsim.errors import UnknownNameError
from aocsim.nn.deq import DEQ, DEQConfig
from aocsim.nn.implicit_ssm import ImplicitSSM, SSMConfig
from aocsim.nn.mamba2_lm import Mamba2Config, Mamba2LM
from aocsim.nn.twin_deq import TwinDEQ, TwinDEQConfig

Builder = Callable[[dict[str, Any], torch.dtype], nn.Module]


def _build_deq(config: dict[str, Any], dtype: torch.dtype) -> DEQ:
    cfg = dict(config)
    cfg["blocks"] = tuple(cfg.get("blocks", ()))
    return DEQ(DEQConfig(**cfg), dtype=dtype)


def _build_ssm(config: dict[str, Any], dtype: torch.dtype) -> ImplicitSSM:
    return ImplicitSSM(SSMConfig(**config)).to(dtype)


def _build_mamba2(config: dict[str, Any], dtype: torch.dtype) -> Mamba2LM:
    return Mamba2LM(Mamba2Config(**config)).to(dtype)


def _build_twin_deq(config: dict[str, Any], dtype: torch.dtype) -> TwinDEQ:
    return TwinDEQ(TwinDEQConfig(**config), dtype=dtype)


# card "kind" -> builder(config dict, dtype) -> the untrained module
KINDS: dict[str, Builder] = {
    "deq": _build_deq,
    "implicit_ssm": _build_ssm,
    "mamba2": _build_mamba2,
    "twin_deq": _build_twin_deq,
}


def builder(kind: str) -> Builder:
    """The builder of model kind `kind`, or an UnknownNameError listing the kinds."""
    if kind not in KINDS:
        raise UnknownNameError("model kind", kind, list(KINDS))
    return KINDS[kind]
