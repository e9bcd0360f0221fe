"""Bounds on the numbers of a training run's configuration, checked without torch (chapter 6).

``TrainConfig`` checks every field against these rules when it is built, so
the Python API and the command line refuse the same values with the same
line.  ``gputrain train`` also checks its flags here before it imports
torch: a bad value is then answered at once, not after the seconds torch
takes to load.  :func:`check_field` judges one field alone;
:func:`check_together` the numbers that bound each other (warmup_steps and
max_steps, seq_len and block_size), given every field's value.  Nothing here
imports torch or the rest of the package.
"""

from __future__ import annotations

import math

# counts that cannot be zero
AT_LEAST_ONE = frozenset(
    {
        "vocab_size",
        "block_size",
        "n_layer",
        "n_head",
        "n_embd",
        "batch_size",
        "grad_accum_steps",
        "max_steps",
        "eval_batches",
        "max_bad_steps",
        "keep_checkpoints",
    }
)
# counts, sizes and weights where 0 means "off" or "the default"
AT_LEAST_ZERO = frozenset(
    {
        "seq_len",
        "corpus_bytes",
        "warmup_steps",
        "weight_decay",
        "grad_clip",
        "eval_interval",
        "patience",
        "spike_window",
        "checkpoint_interval",
        "seed",
        "restart_steps",
        "schedule_steps",
        "n_experts",
        "n_shared_experts",
        "expert_hidden",
        "capacity_factor",
        "aux_loss_weight",
        "bias_gamma",
        "moe_first_dense",
    }
)
# name -> (lowest, highest, lowest allowed, highest allowed, what to say after the range)
INTERVALS = {
    "val_fraction": (0.0, 1.0, False, False, ""),
    "min_lr_ratio": (0.0, 1.0, True, True, ""),
    "beta1": (0.0, 1.0, True, False, "; common choices are 0.9 to 0.999"),
    "beta2": (0.0, 1.0, True, False, "; common choices are 0.9 to 0.999"),
    "decay_fraction": (0.0, 1.0, False, True, ""),
}


def check_field(name: str, value) -> None:
    """Raise one ``ValueError`` naming the fix when ``value`` is out of bounds for the field ``name``.

    A float that is not finite is refused for every field: ``grad_clip=nan``
    would switch clipping off, ``weight_decay=inf`` would wipe the weights.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return  # types are TrainConfig's (and argparse's) to check
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}")
    if name in AT_LEAST_ONE and value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    if name in AT_LEAST_ZERO and value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    if name == "vocab_size" and value < 256:
        raise ValueError(f"vocab_size={value} is too small for bytes; use at least 256")
    if name == "lr" and not value > 0:
        raise ValueError(f"lr must be a positive number, got {value}")
    if name == "spike_threshold" and not value > 0:
        raise ValueError(f"spike_threshold must be > 0, got {value}")
    if name == "spike_window" and value == 1:
        raise ValueError("spike_window must be 0 (off) or >= 2 losses")
    if name in INTERVALS:
        low, high, low_in, high_in, advice = INTERVALS[name]
        if not ((low <= value if low_in else low < value) and (value <= high if high_in else value < high)):
            span = f"{'[' if low_in else '('}{low:g}, {high:g}{']' if high_in else ')'}"
            raise ValueError(f"{name} must be in {span}, got {value}{advice}")


def check_fields(values: dict) -> None:
    """:func:`check_field` for each ``name: value`` (the flags a command line gave, or a config's fields)."""
    for name, value in values.items():
        check_field(name, value)


def check_together(values: dict) -> None:
    """Refuse numbers that contradict each other; ``values`` holds every field of a run's configuration."""
    if values["seq_len"] > values["block_size"]:
        raise ValueError(
            f"seq_len={values['seq_len']} exceeds the model's context block_size={values['block_size']}; "
            "lower --seq-len or raise --block-size"
        )
    spans = values["schedule_steps"] or values["max_steps"]
    if values["warmup_steps"] > spans:
        which = "schedule_steps" if values["schedule_steps"] else "max_steps"
        raise ValueError(f"warmup_steps={values['warmup_steps']} exceeds {which}={spans}; shorten the warmup")
