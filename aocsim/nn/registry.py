"""Model kinds that `aocsim.load_model` can rebuild from a model card."""

from __future__ import annotations

from typing import Any

import torch

from aocsim.io.model_files import register_kind
from aocsim.nn.deq import DEQ, DEQConfig
from aocsim.nn.implicit_ssm import ImplicitSSM, SSMConfig


def _build_deq(config: dict[str, Any], dtype: torch.dtype) -> DEQ:
    cfg = dict(config)
    cfg["blocks"] = tuple(cfg.get("blocks", ()))
    return DEQ(DEQConfig(**cfg), dtype=dtype)


def _build_ssm(config: dict[str, Any], dtype: torch.dtype) -> ImplicitSSM:
    return ImplicitSSM(SSMConfig(**config)).to(dtype)


register_kind("deq", _build_deq)
register_kind("implicit_ssm", _build_ssm)
