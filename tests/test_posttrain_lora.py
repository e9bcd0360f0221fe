"""LoRA from scratch (chapter 12) against PEFT's LoraModel on the book's GPT, and its memory."""

import copy
import math
import os

import pytest
import torch
from helpers import SMALL_GPT

from gputrain.memory import estimate, finetune_memory
from gputrain.model import GPT, GPTConfig
from gputrain.posttrain import (
    DEFAULT_TARGETS,
    LoRALinear,
    apply_lora,
    lora_layers,
    lora_memory,
    lora_parameter_count,
    merge_lora,
    unload_lora,
    unmerge_lora,
)

torch.set_num_threads(1)
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # PEFT never reaches the network in these tests

R, ALPHA = 4, 8


def small_gpt() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(**{k: v for k, v in SMALL_GPT.items() if k != "batch_size"}))


def with_random_b(model) -> GPT:
    """B starts at zero, which would hide any error in how B is applied: give it values."""
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for layer in lora_layers(model).values():
            layer.lora_B.copy_(torch.randn(layer.lora_B.shape, generator=gen) * 0.1)
    return model


def ours_and_peft():
    """The same GPT twice: our adapters on one, PEFT's on the other, holding the same A and B."""
    peft = pytest.importorskip("peft")
    base = small_gpt()
    ours = copy.deepcopy(base)
    apply_lora(ours, R, ALPHA)
    with_random_b(ours)
    theirs = peft.inject_adapter_in_model(
        peft.LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=list(DEFAULT_TARGETS)),
        copy.deepcopy(base),
    )
    with torch.no_grad():
        for name, layer in lora_layers(ours).items():
            peft_layer = theirs.get_submodule(name)
            peft_layer.lora_A["default"].weight.copy_(layer.lora_A)
            peft_layer.lora_B["default"].weight.copy_(layer.lora_B)
    return ours, theirs


def loss_and_grads(model, x, y) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    logits, loss = model(x, y)
    loss.backward()
    grads = {}
    for n, p in model.named_parameters():
        if p.requires_grad:  # ours: ....lora_A / lora_B; PEFT: ....lora_A.default.weight
            grads[n.replace(".default.weight", "")] = p.grad
    return logits.detach(), grads


def test_our_lora_equals_peft_in_outputs_and_gradients_and_after_merge():
    ours, theirs = ours_and_peft()
    x = torch.randint(0, 256, (4, 32), generator=torch.Generator().manual_seed(2))
    y = torch.randint(0, 256, (4, 32), generator=torch.Generator().manual_seed(3))
    out_ours, g_ours = loss_and_grads(ours, x, y)
    out_theirs, g_theirs = loss_and_grads(theirs, x, y)
    assert sorted(g_ours) == sorted(g_theirs) and len(g_ours) == 2 * 4 * ours.cfg.n_layer  # A and B, 4 layers
    out_diff = (out_ours - out_theirs).abs().max().item()
    grad_diff = max((g_ours[n] - g_theirs[n]).abs().max().item() for n in g_ours)
    assert out_diff <= 1e-6 and grad_diff <= 1e-6, (out_diff, grad_diff)
    # after merging, each model's logits move only by the FP32 rounding of W + (alpha/r) B A
    with torch.no_grad():
        merge_lora(ours)
        for name in lora_layers(ours):
            theirs.get_submodule(name).merge()
        merged_ours, merged_theirs = ours(x)[0], theirs(x)[0]
    merge_diff = (merged_ours - merged_theirs).abs().max().item()
    rounding = (merged_ours - out_ours).abs().max().item()
    assert merge_diff <= 1e-6 and rounding <= 1e-5, (merge_diff, rounding)
    print(
        f"LoRA vs PEFT, max |diff|: outputs {out_diff:.1e}, gradients {grad_diff:.1e}, merged outputs "
        f"{merge_diff:.1e}; merged vs unmerged {rounding:.1e}"
    )


def test_lora_starts_as_the_pretrained_model_with_a_initialised_as_peft_does():
    base = small_gpt().eval()
    model = copy.deepcopy(base)
    names = apply_lora(model, R, ALPHA)
    assert names == [f"blocks.0.{t}" for t in DEFAULT_TARGETS]
    x = torch.randint(0, 256, (2, 16))
    assert torch.equal(model(x)[0], base(x)[0])  # B = 0: no change at step 0
    for layer in lora_layers(model).values():
        assert layer.scale == ALPHA / R and not layer.lora_B.any()
        bound = 1 / math.sqrt(layer.base.in_features)  # kaiming_uniform_(a=sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in))
        assert layer.lora_A.abs().max() <= bound and layer.lora_A.abs().max() > 0.8 * bound
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert all(n.endswith(("lora_A", "lora_B")) for n in trainable) and len(trainable) == 8


def test_merge_then_unmerge_gives_the_frozen_weights_back():
    model = small_gpt()
    apply_lora(model, R, ALPHA)
    with_random_b(model)
    before = {n: layer.base.weight.detach().clone() for n, layer in lora_layers(model).items()}
    x = torch.randint(0, 256, (2, 16))
    unmerged = model(x)[0].detach()
    merge_lora(model)
    assert all(layer.merged for layer in lora_layers(model).values())
    torch.testing.assert_close(model(x)[0].detach(), unmerged, atol=1e-5, rtol=0)
    merge_lora(model)  # a second merge adds nothing
    unmerge_lora(model)
    for n, layer in lora_layers(model).items():
        torch.testing.assert_close(layer.base.weight, before[n], atol=1e-6, rtol=0)
    # unloading leaves the plain GPT the checkpoint loader builds, with the update folded in
    plain_keys = set(small_gpt().state_dict())
    assert unload_lora(model) == [f"blocks.0.{t}" for t in DEFAULT_TARGETS]
    assert set(model.state_dict()) == plain_keys and not lora_layers(model)
    torch.testing.assert_close(model(x)[0].detach(), unmerged, atol=1e-5, rtol=0)


@pytest.mark.parametrize("r", [0, -1, 33, 2.0, True])
def test_a_rank_the_layer_cannot_hold_is_refused_in_one_line_and_the_model_is_untouched(r):
    model = small_gpt()
    with pytest.raises(ValueError) as err:
        apply_lora(model, r, ALPHA)
    msg = str(err.value)
    assert "use an integer from 1 to 32" in msg and "blocks.0.attn.qkv (32 -> 96)" in msg and "\n" not in msg
    assert not lora_layers(model) and all(p.requires_grad for p in model.parameters())


def test_targets_that_match_nothing_and_a_bad_alpha_are_refused():
    with pytest.raises(ValueError, match="no linear layer matches LoRA targets \\['c_attn'\\]"):
        apply_lora(small_gpt(), R, ALPHA, targets="c_attn")
    with pytest.raises(ValueError, match="alpha must be > 0"):
        LoRALinear(torch.nn.Linear(8, 8), 2, 0)


def test_trainable_counts_equal_peft_and_feed_the_memory_estimate():
    ours, theirs = ours_and_peft()
    counts = lora_parameter_count(ours)
    C = ours.cfg.n_embd
    per_block = R * ((C + 3 * C) + (C + C) + (C + 4 * C) + (4 * C + C))  # qkv, proj, fc, proj
    assert counts["trainable"] == per_block * ours.cfg.n_layer
    assert counts["trainable"] == sum(p.numel() for p in theirs.parameters() if p.requires_grad)
    assert counts["trainable"] + counts["frozen"] == sum(p.numel() for p in theirs.parameters())
    mem = lora_memory(ours, precision="fp32", optimizer="adamw")
    # Adam's m and v in FP32 and a 4-byte step per tensor, for the adapters only
    assert mem.optimizer_states == 8 * counts["trainable"] + 4 * counts["trainable_tensors"]
    assert mem.gradients == 4 * counts["trainable"] and mem.master_weights == 0
    assert mem.parameters == 4 * (counts["trainable"] + counts["frozen"])


def test_finetune_memory_of_a_full_fine_tune_is_the_pretraining_estimate_and_an_int4_base_costs_half_a_byte():
    full = finetune_memory(7e9, 7e9, precision="bf16-mixed", optimizer="adam")
    pre = estimate(7e9, precision="bf16-mixed", optimizer="adam")
    for part in ("parameters", "gradients", "master_weights", "optimizer_states"):
        assert getattr(full, part) == getattr(pre, part), part
    qlora = finetune_memory(7e9, 4e7, precision="bf16-mixed", base_bytes=0.5)
    assert qlora.parameters == (7e9 - 4e7) * 0.5 + 4e7 * 2
    assert qlora.static + qlora.gradients < 0.05 * full.total  # 16 bytes a weight against about 0.6
    with pytest.raises(ValueError, match="exceeds params"):
        finetune_memory(10, 11)
    with pytest.raises(ValueError, match="base_bytes must be >= 0"):
        finetune_memory(10, 1, base_bytes=-1)
