"""Training a GPT (chapter 6): configuration, components, the step, the loop, checkpoints, the log, use.

``from gputrain.train import TrainConfig, train`` is all a script needs::

    result = train(TrainConfig(max_steps=500, optimizer="adamw", schedule="wsd"))
    text = sample(result.checkpoint, prompt="def ", tokens=200)

Modules, each readable in one sitting:

* :mod:`~gputrain.train.config`: ``TrainConfig`` and its presets;
* :mod:`~gputrain.train.components`: the tables of optimizers, schedules and
  precisions chosen by name;
* :mod:`~gputrain.train.inputs`: the corpus, its windows and the data order;
* :mod:`~gputrain.train.step`: ``train_step``, ``evaluate``, the step guard
  and the spike detector;
* :mod:`~gputrain.train.progress`: a run's :class:`Progress` and its
  :class:`TrainResult`;
* :mod:`~gputrain.train.hardware` and :mod:`~gputrain.train.preflight`: what
  a run checks before it writes anything;
* :mod:`~gputrain.train.start` and :mod:`~gputrain.train.loop`: the run's
  setup, then ``train`` and its phases;
* :mod:`~gputrain.train.checkpoint` and :mod:`~gputrain.train.runlog`: what
  a run leaves on disk;
* :mod:`~gputrain.train.resume`: a resume continues the checkpoint's own
  configuration, and which changes it may make;
* :mod:`~gputrain.train.rundir` and :mod:`~gputrain.train.interrupt`: the
  directories a run probes and locks, and Ctrl-C or SIGTERM ending it with a
  checkpoint;
* :mod:`~gputrain.train.generate`: ``sample``, ``stream_samples`` and
  ``evaluate_text`` on a trained checkpoint.
"""

from .checkpoint import CheckpointError, list_checkpoints, read_checkpoint
from .components import MIXED_PRECISION, OPTIMIZERS, SCHEDULES, lr_lambda, make_optimizer, param_groups
from .config import PRESETS, TrainConfig, data_source, gpt2_small, preset_config, small, tiny
from .generate import evaluate_text, load_model, sample, stream_samples
from .hardware import check_hardware, make_accelerator
from .inputs import EpochSampler, WithLoss, build_data, load_text
from .loop import train
from .progress import Progress, TrainResult, summary_line
from .runlog import LOG_COLUMNS, RunLog, event_steps, plot_history, read_history
from .step import SpikeDetector, StepGuard, StepStats, TrainingDiverged, evaluate, train_step

__all__ = [
    "CheckpointError",
    "list_checkpoints",
    "read_checkpoint",
    "MIXED_PRECISION",
    "OPTIMIZERS",
    "SCHEDULES",
    "lr_lambda",
    "make_optimizer",
    "param_groups",
    "PRESETS",
    "TrainConfig",
    "data_source",
    "gpt2_small",
    "preset_config",
    "small",
    "tiny",
    "evaluate_text",
    "load_model",
    "sample",
    "stream_samples",
    "EpochSampler",
    "WithLoss",
    "build_data",
    "load_text",
    "Progress",
    "TrainResult",
    "check_hardware",
    "make_accelerator",
    "summary_line",
    "train",
    "LOG_COLUMNS",
    "RunLog",
    "event_steps",
    "plot_history",
    "read_history",
    "SpikeDetector",
    "StepGuard",
    "StepStats",
    "TrainingDiverged",
    "evaluate",
    "train_step",
]
