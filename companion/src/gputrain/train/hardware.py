"""The run's hardware (chapter 6): the checks Accelerate does not make, and the run's one ``Accelerator``.

:func:`check_hardware` turns a precision or FSDP setting the machine cannot run
into one clear error (Accelerate would fall back silently or fail deep inside);
:func:`make_accelerator` builds the ``Accelerator`` from the config.
"""

from __future__ import annotations

import importlib.util
import warnings

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin, GradientAccumulationPlugin

from ..speed import native_bf16
from .config import TrainConfig


class Bf16SlowWarning(UserWarning):
    """bf16 asked for on a CPU that converts every bf16 operand in software (shown once per process)."""


def check_hardware(cfg: TrainConfig) -> None:
    """One clear error where Accelerate would silently fall back (fp16 on a CPU) or fail deep inside."""
    cuda = torch.cuda.is_available()
    if cfg.mixed_precision == "fp16" and not cuda:
        raise ValueError(
            "mixed_precision='fp16' needs a CUDA GPU (on a CPU Accelerate silently trains in fp32); use 'bf16' or 'no'"
        )
    if cfg.mixed_precision == "bf16" and cuda and not torch.cuda.is_bf16_supported():
        raise ValueError("mixed_precision='bf16' needs an Ampere or newer GPU; use 'fp16' or 'no'")
    if cfg.mixed_precision == "bf16" and not cuda and not (bf16 := native_bf16("cpu")).native:
        warnings.warn(
            f"mixed_precision='bf16' on a CPU without native bf16: {bf16}; this run will be slower "
            "than with mixed_precision='no' (chapter 7 emulates bf16 in FP32 instead)",
            Bf16SlowWarning,
            stacklevel=4,  # the line that called train()
        )
    if cfg.mixed_precision == "fp8":
        if not cuda or torch.cuda.get_device_capability() < (8, 9):
            raise ValueError(
                "mixed_precision='fp8' needs an FP8 GPU (compute capability 8.9+: Ada, Hopper); use 'bf16' here"
            )
        if not any(importlib.util.find_spec(m) for m in ("torchao", "transformer_engine", "msamp")):
            raise ValueError("mixed_precision='fp8' needs an FP8 backend: pip install torchao")
    if cfg.fsdp and not cuda:
        raise ValueError(
            "fsdp=True needs CUDA GPUs: Accelerate shards only there (on a CPU it silently runs DDP); drop --fsdp"
        )
    if cfg.fsdp and (cfg.checkpoint_dir or cfg.resume_from or cfg.patience):
        # both need whole (gathered) weights from sharded DTensors, which this loop does not do yet
        raise ValueError(
            "checkpoints and early stopping with fsdp=True are not supported by "
            "gputrain.train yet; drop --checkpoint-dir/--resume-from/--patience or --fsdp"
        )


def make_accelerator(cfg: TrainConfig) -> Accelerator:
    """The run's one Accelerator (any state left by an earlier run in this process is reset first)."""
    AcceleratorState._reset_state(reset_partial_state=False)  # keeps the process group, drops old settings
    GradientState._reset_state()
    fsdp_plugin = None
    if cfg.fsdp:
        fsdp_plugin = FullyShardedDataParallelPlugin(
            fsdp_version=2,
            reshard_after_forward=True,
            auto_wrap_policy="transformer_based_wrap",
            transformer_cls_names_to_wrap=["Block"],
            cpu_ram_efficient_loading=False,
        )
    accelerator = Accelerator(
        mixed_precision=cfg.mixed_precision,
        cpu=not torch.cuda.is_available(),
        fsdp_plugin=fsdp_plugin,
        gradient_accumulation_plugin=GradientAccumulationPlugin(
            num_steps=cfg.grad_accum_steps, sync_with_dataloader=False
        ),
        dynamo_backend="inductor" if cfg.compile else "no",
        log_with="tensorboard" if cfg.tensorboard else None,
        project_dir=cfg.log_dir or None,
    )
    if cfg.fsdp and accelerator.distributed_type != DistributedType.FSDP:
        raise ValueError("fsdp=True needs a distributed launch: accelerate launch --use_fsdp ... or torchrun")
    return accelerator
