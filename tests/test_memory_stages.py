"""Chapter 13's memory per stage: which models SFT, DPO, GRPO and PPO hold, and what fits on an H100 or H200."""

import json

import pytest

from gputrain.cli import main
from gputrain.device import GPU_SPECS
from gputrain.memory import (
    GPT2_SMALL,
    LLAMA3_70B,
    LLAMA_7B,
    ROLLOUT_BATCH,
    STAGE_MODELS,
    STAGES,
    estimate,
    kv_cache_bytes,
    stage_memory,
)


def test_a_stage_holds_its_models_trained_or_frozen():
    s = {stage: stage_memory(stage, "7b", batch_size=2, seq_len=512) for stage in STAGES}
    trained = estimate(LLAMA_7B, batch_size=2, seq_len=512, optimizer="adamw", activation_model="korthikanti")
    # bf16-mixed with AdamW: 2 (weights) + 4 (FP32 master) + 2 x 4 (moments) = 14 bytes per trained parameter
    assert abs(s["sft"].resident["policy: weights, master weights, optimizer states"] - 14 * 6.7e9) < 1e4
    assert s["sft"].learning == {"policy: gradients and activations": trained.peak - trained.static}
    assert s["dpo"].resident["reference: weights (frozen)"] == 2 * 6.7e9  # 16-bit weights, nothing else
    assert set(s["ppo"].resident) == {
        "policy: weights, master weights, optimizer states",
        "value: weights, master weights, optimizer states",
        "reference: weights (frozen)",
        "reward: weights (frozen)",
    }
    assert s["sft"].rollout == s["dpo"].rollout == {}
    # DPO's micro-batch of 2 pairs runs 4 sequences: more activations than SFT's 2
    assert (
        s["dpo"].learning["policy: gradients and activations"] > s["sft"].learning["policy: gradients and activations"]
    )
    assert s["sft"].peak < min(s["dpo"].peak, s["grpo"].peak) and s["grpo"].peak < s["ppo"].peak


def test_the_rollouts_kv_cache_is_counted_by_hand_and_freed_before_learning():
    g = stage_memory("grpo", "gpt2-small", rollout_batch=64)
    # 2 (K and V) x 12 layers x 1024 tokens x 768 wide x 2 bytes x 64 sequences
    assert g.rollout == {"rollouts: KV cache": 2 * 12 * 1024 * 768 * 2 * 64}
    assert g.rollout["rollouts: KV cache"] == kv_cache_bytes(GPT2_SMALL, 1024, 64, 2)
    held = sum(g.resident.values())
    assert g.peak == held + max(sum(g.learning.values()), sum(g.rollout.values()))
    assert g.total == held + sum(g.learning.values()) + sum(g.rollout.values()) > g.peak
    # Llama 3 70B keeps 8 of its 64 heads' keys and values: an eighth of a full cache
    big = stage_memory("grpo", "70b", rollout_batch=8, seq_len=4096)
    assert big.rollout["rollouts: KV cache"] == 2 * 80 * 4096 * (8192 * 8 // 64) * 2 * 8


def test_what_fits_on_one_gpu():
    hbm = {g: GPU_SPECS[g].hbm_bytes for g in ("H100", "H200")}
    assert hbm["H100"] == 80 * 2**30 and hbm["H200"] == 141 * 2**30
    for stage in STAGES:
        small = stage_memory(stage, "gpt2-small")
        assert small.fits("H100") and small.fits("H200")
        huge = stage_memory(stage, "70b")
        assert not huge.fits("H200") and huge.peak > 14 * 70e9  # the policy's training state alone is 980 GB
    sft7 = stage_memory("sft", "7b")
    assert sft7.fits("H200") == (sft7.peak <= hbm["H200"]) and sft7.fits("H100") == (sft7.peak <= hbm["H100"])
    assert not sft7.fits("H100")  # 14 bytes x 6.7e9 = 93.8 GB of training state before any activation


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(stage="rlhf"), "unknown stage 'rlhf'; use one of: sft, dpo, grpo, ppo"),
        (dict(model="gpt3-175b"), "unknown model 'gpt3-175b' for a stage"),
        (dict(rollout_batch=0), "rollout_batch must be an integer >= 1, got 0"),
        (dict(batch_size=1.5), "batch_size must be an integer >= 1"),
        (dict(seq_len=2048), "seq_len 2048 exceeds the context of gpt2-small \\(1024 tokens\\)"),
    ],
)
def test_bad_stage_settings_are_one_line(kwargs, message):
    settings = dict(stage="grpo", model="gpt2-small") | kwargs
    with pytest.raises(ValueError, match=message) as err:
        stage_memory(settings.pop("stage"), settings.pop("model"), **settings)
    assert "\n" not in str(err.value)


def test_cli_memory_stage_prints_every_model_against_both_gpus(capsys):
    assert main(["memory", "--stage", "ppo"]) == 0
    out = capsys.readouterr().out
    for model in STAGE_MODELS:
        assert f"\n{model} (" in out
    assert out.count("peak fits on one: H100") == 3 and "reward: weights (frozen)" in out and "value:" in out
    assert main(["memory", "--stage", "grpo", "--model", "7b", "--json", "--rollout-batch", "32"]) == 0
    got = json.loads(capsys.readouterr().out)
    want = stage_memory("grpo", "7b", rollout_batch=32, optimizer="adam")
    assert got["stage"] == "grpo" and [m["model"] for m in got["models"]] == ["7b"]
    assert got["models"][0]["peak"] == want.peak and got["models"][0]["fits"] == {"H100": False, "H200": True}


def test_cli_rollout_batch_default_is_the_library_s():
    from gputrain.cli.program import build_parser

    assert build_parser().parse_args(["memory", "--stage", "grpo"]).rollout_batch == ROLLOUT_BATCH
    assert LLAMA3_70B.kv_heads == 8 and STAGE_MODELS["70b"] is LLAMA3_70B


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--stage", "grpo", "--params", "7e9"], "--stage needs a model's shape, not --params"),
        (["--stage", "grpo", "--model", "gpt3-175b"], "--stage counts --model gpt2-small, 7b, 70b; got gpt3-175b"),
        (["--stage", "ppo", "--rollout-batch", "0"], "--rollout-batch must be between 1 and 1e+07, got 0"),
        (["--stage", "sft", "--seq-len", "2048"], "seq_len 2048 exceeds the context of gpt2-small"),
        (["--stage", "dpo", "--zero-stage", "1"], "--stage counts one GPU without ZeRO"),
        (["--stage", "dpo", "--activation-model", "gputrain"], "drop --activation-model"),
    ],
)
def test_cli_bad_stage_input_is_one_line_and_exit_2(capsys, argv, message):
    assert main(["memory", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gputrain memory: error: ") and message in err and "\n" not in err


def test_cli_unknown_stage_exits_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["memory", "--stage", "rlhf"])
    assert exit_.value.code == 2 and "invalid choice: 'rlhf'" in capsys.readouterr().err
