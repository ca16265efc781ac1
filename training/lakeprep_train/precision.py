"""How training steps compute: fp32, or bf16/fp16 autocast (fp16 with a gradient scaler)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch

from lakeprep_train.preflight import PreflightError

PRECISIONS = ("auto", "fp32", "bf16", "fp16")


@dataclass(frozen=True)
class Precision:
    """How steps compute: ``autocast`` dtype (None: fp32) and whether a gradient scaler runs."""

    name: str
    autocast: torch.dtype | None
    scaler: bool

    def context(self, device: torch.device) -> Any:
        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=self.autocast)


def resolve_precision(choice: str, device: torch.device) -> Precision:
    """``auto``: bf16 on CUDA devices that have it, fp16 with a scaler on older ones, fp32 on CPU."""
    bf16_ok = device.type != "cuda" or torch.cuda.is_bf16_supported()
    if choice == "auto":
        if device.type != "cuda":
            return Precision("fp32", None, False)
        choice = "bf16" if bf16_ok else "fp16"
    if choice == "bf16":
        if not bf16_ok:
            raise PreflightError(
                f"--precision bf16: {torch.cuda.get_device_name(device)} has no bf16 support; "
                "use fp16 (with a gradient scaler) or auto"
            )
        return Precision("bf16", torch.bfloat16, False)
    if choice == "fp16":
        return Precision("fp16", torch.float16, True)
    return Precision("fp32", None, False)
