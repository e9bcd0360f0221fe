"""Chapter 13's losses from scratch, checked against TRL 1.16's own trainers on one frozen batch, and the KL estimators.

TRL, transformers, datasets and tokenizers are the book extra's: where they
cannot be imported, the tests that call TRL skip and say so; the rest run.
TRL is called offline on a GPT-2 built from a config (no download), with
``bf16=False`` and no dropout, through ``GRPOTrainer._compute_loss`` and
``DPOTrainer._compute_loss``.

Precision.  The model, the batch and both losses are float64, but TRL 1.16
cannot score tokens in float64: its fused LM head (``trl/kernels/
chunked_logprob.py``) rounds each tile of logits to float32 before the
log-softmax.  A token's log-prob near ln(1/258) = -5.55 then carries float32's
rounding: half an ulp at 5.55 is 2.4e-7, plus the log-sum-exp's few roundings
of relative 6e-8.  Every loss here weighs its per-token terms with weights
that sum to at most 1 (a mean, or a sum divided by at least the token count),
times factors of order 1 (ratios near 1, advantages of a few units, beta), and
the gradient inherits the float32 softmax's relative error.  So the bound is
``TOL`` = 1e-6 on the loss and on every weight's gradient, not float64's
1e-12.  To show that the rest is the formula and not the rounding, each test
also feeds TRL's own float32 log-probs to our loss: then the values agree
within 1e-12.
"""

import math
import os
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from gputrain.model import GPT, GPTConfig
from gputrain.posttrain import (
    ADVANTAGE_EPS,
    KL_ESTIMATORS,
    LOSS_TYPES,
    NAME_MAP,
    aggregate,
    anchor_advantages,
    anchor_loss,
    clip_fraction,
    completion_logprobs,
    dpo_loss,
    estimator_stats,
    exact_kl,
    gae,
    group_advantages,
    grpo_loss,
    leave_one_out_baseline,
    ppo_loss,
    reinforce_loss,
    rloo_advantages,
    rloo_clipped_loss,
    rloo_loss,
    sequence_clip_mask,
    sequence_logprob,
    token_logprobs,
)

torch.set_num_threads(1)
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # TRL's trainers never reach the Hub here
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

TOL = 1e-6  # the conformance bound on |loss - TRL's| and on every |gradient - TRL's|
G, PROMPTS, P, T = 4, 3, 4, 6  # group size, prompts, prompt and completion lengths of the frozen batch
EPS_LOW, EPS_HIGH = 0.2, 0.28  # asymmetric, so that a swapped low/high would show
VOCAB = 258  # bytes, then <eos> = 256 and <pad> = 257
# every trainer: float64 as built (bf16 off), no activation checkpointing, no pinned memory or logging on this CPU
PLAIN = dict(bf16=False, activation_checkpointing=False, dataloader_pin_memory=False, report_to=[])


# ---------------------------------------------------------------------------------------------------------------------
# TRL, offline, on a GPT-2 built from a config


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    """TRL's pieces, a byte tokenizer, and a float64 GPT-2 whose weights every test starts from."""
    reason = "TRL is the reference these losses are checked against: pip install -e 'companion[book]'"
    for name in ("trl", "transformers", "datasets", "tokenizers"):
        pytest.importorskip(name, reason=reason)
    import datasets
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
    from trl import DPOConfig, DPOTrainer, GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer

    datasets.disable_progress_bars()
    bpe = Tokenizer(models.BPE(vocab={bytes([i]).decode("latin-1"): i for i in range(256)}, merges=[]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    bpe.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<eos>", pad_token="<pad>")
    config = GPT2Config(
        vocab_size=VOCAB, n_positions=32, n_embd=16, n_layer=2, n_head=2, bos_token_id=256, eos_token_id=256,
        pad_token_id=257, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    with torch.random.fork_rng():
        torch.manual_seed(0)
        base = GPT2LMHeadModel(config).double()
    folder = tmp_path_factory.mktemp("gpt2")
    base.save_pretrained(folder)  # TRL rebuilds a reference from config._name_or_path when beta > 0

    def model():
        m = GPT2LMHeadModel(config).double()
        m.load_state_dict(base.state_dict())
        m.config._name_or_path = str(folder)
        return m.train()

    return SimpleNamespace(
        model=model, tokenizer=tokenizer, out=str(tmp_path_factory.mktemp("trl")), datasets=datasets,
        GRPOConfig=GRPOConfig, GRPOTrainer=GRPOTrainer, DPOConfig=DPOConfig, DPOTrainer=DPOTrainer,
        RLOOConfig=RLOOConfig, RLOOTrainer=RLOOTrainer,
    )  # fmt: skip


def grads(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def logits_of(model):
    return lambda ids: model(input_ids=ids).logits


@pytest.fixture(scope="module")
def batch():
    """One frozen GRPO batch: 3 prompts x 4 replies of unequal lengths, rewards, and old and reference log-probs.

    The old and reference log-probs are log(1 / 258) (a GPT-2 at init is close
    to uniform) plus seeded noise of 0.3, so that some ratios fall outside the
    clip on each side and some inside.
    """
    gen = torch.Generator().manual_seed(7)
    B = G * PROMPTS
    prompt_ids = torch.randint(0, 256, (PROMPTS, P), generator=gen).repeat_interleave(G, 0)
    completion_ids = torch.randint(0, 256, (B, T), generator=gen)
    lengths = torch.tensor([6, 1, 4, 2, 6, 6, 3, 5, 2, 6, 4, 6])
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.2, 0.9, 0.4, 0.7, 1.0, 1.0, 0.0, 1.0], dtype=torch.float64)
    start = torch.full((B, T), -math.log(VOCAB), dtype=torch.float64)
    old = start + 0.3 * torch.randn(B, T, generator=gen, dtype=torch.float64)
    ref = start + 0.3 * torch.randn(B, T, generator=gen, dtype=torch.float64)
    # dapo divides by the counted tokens of the whole generation batch: this batch is one of two alike
    return SimpleNamespace(prompt_ids=prompt_ids, completion_ids=completion_ids, mask=mask, rewards=rewards,
                           old=old, ref=ref, num_items=2 * mask.sum())  # fmt: skip


def online_trainer(hf, kind: str, **config):
    """TRL's GRPOTrainer or RLOOTrainer (``kind``) on a fresh copy of the GPT-2, set for the frozen batch."""
    args = getattr(hf, f"{kind}Config")(
        output_dir=hf.out, disable_dropout=True, **PLAIN,
        num_generations=G, per_device_train_batch_size=G * PROMPTS, max_completion_length=T, **config,
    )  # fmt: skip
    prompts = hf.datasets.Dataset.from_dict({"prompt": ["a"] * PROMPTS})
    zero = lambda completions, **_: [0.0] * len(completions)  # noqa: E731 (the loss never reads a reward)
    trainer = getattr(hf, f"{kind}Trainer")(model=hf.model(), reward_funcs=zero, args=args, train_dataset=prompts,
                                           processing_class=hf.tokenizer)  # fmt: skip
    trainer.current_gradient_accumulation_steps = 1
    return trainer


def completion_inputs(batch, advantages, **more) -> dict:
    """The frozen batch as a trainer's ``_compute_loss`` reads it."""
    return dict(prompt_ids=batch.prompt_ids, prompt_mask=torch.ones_like(batch.prompt_ids),
                completion_ids=batch.completion_ids, completion_mask=batch.mask, advantages=advantages,
                **more)  # fmt: skip


def trl_grpo(hf, batch, advantages, *, on_policy=False, **config):
    """TRL's GRPOTrainer._compute_loss on the frozen batch: (loss, gradient of every weight, TRL's own log-probs)."""
    trainer = online_trainer(hf, "GRPO", **config)
    inputs = completion_inputs(batch, advantages, num_items_in_batch=batch.num_items, ref_per_token_logps=batch.ref)
    if not on_policy:
        inputs["old_per_token_logps"] = batch.old
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    with torch.no_grad():
        ids = torch.cat([batch.prompt_ids, batch.completion_ids], 1)
        mask = torch.cat([inputs["prompt_mask"], batch.mask], 1)
        logps = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, T)[0]
    return loss.detach(), grads(trainer.model), logps


def ours(hf, batch, loss_fn):
    """A from-scratch loss on the same GPT-2 weights: ``loss_fn(logps)``; (loss, gradient of every weight)."""
    model = hf.model()
    logps = completion_logprobs(logits_of(model), batch.prompt_ids, batch.completion_ids)
    loss = loss_fn(logps)
    loss.backward()
    return loss.detach(), grads(model)


def differences(mine, theirs) -> tuple[float, float]:
    (loss, grad), (trl_loss, trl_grad) = mine, theirs[:2]
    assert grad.abs().max() > 1e-4, "the gradient is ~0: the comparison would prove nothing"
    return float((loss - trl_loss).abs()), float((grad - trl_grad).abs().max())


GRPO_SETTINGS = [
    (loss_type, scale, beta, correction)
    for loss_type in LOSS_TYPES
    for scale in ("group", "none")
    for beta, correction in ((0.0, True), (0.04, True), (0.04, False))
]


def grpo_conformance(hf, batch, loss_type, scale, beta, correction) -> tuple[float, float, float]:
    """For one GRPO setting on the frozen batch: max |loss - TRL's| and |gradient - TRL's| from our own log-probs,
    and |loss - TRL's| from TRL's own (float32-rounded) log-probs, which isolates the formula from the rounding."""
    advantages = group_advantages(batch.rewards, G, scale)
    theirs = trl_grpo(hf, batch, advantages, loss_type=loss_type, scale_rewards=scale, beta=beta,
                      epsilon=EPS_LOW, epsilon_high=EPS_HIGH, use_bias_correction_kl=correction)  # fmt: skip

    def loss(lp):
        return grpo_loss(lp, batch.mask, advantages, batch.old, batch.ref, loss_type=loss_type, epsilon=EPS_LOW,
                         epsilon_high=EPS_HIGH, beta=beta, bias_correction_kl=correction, max_length=T,
                         num_items=batch.num_items)  # fmt: skip

    same_logps = float((loss(theirs[2]) - theirs[0]).abs())
    return (*differences(ours(hf, batch, loss), theirs), same_logps)


@pytest.mark.parametrize("loss_type, scale, beta, correction", GRPO_SETTINGS)
def test_every_grpo_loss_type_equals_trls_loss_and_gradient(hf, batch, loss_type, scale, beta, correction):
    dloss, dgrad, formula = grpo_conformance(hf, batch, loss_type, scale, beta, correction)
    assert dloss <= TOL and dgrad <= TOL, f"{loss_type}, {scale}, beta {beta}: |dloss| {dloss:.1e}, |dgrad| {dgrad:.1e}"
    assert formula <= 1e-12, f"{loss_type}, {scale}, beta {beta}: on TRL's own log-probs |dloss| {formula:.1e}"


def trl_rloo(hf, batch, advantages):
    """TRL's RLOOTrainer._compute_loss on the frozen batch: (loss, gradient of every weight)."""
    trainer = online_trainer(hf, "RLOO", epsilon=EPS_LOW, epsilon_high=EPS_HIGH)
    inputs = completion_inputs(batch, advantages, old_logps=(batch.old * batch.mask).sum(1))
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    return loss.detach(), grads(trainer.model)


@pytest.mark.parametrize("normalize", [False, True])
def test_rloo_equals_trls_loss_and_gradient(hf, batch, normalize):
    """TRL's RLOO: one clipped ratio per reply, of its whole log-probability, averaged over replies."""
    advantages = rloo_advantages(batch.rewards, G, normalize=normalize)
    theirs = trl_rloo(hf, batch, advantages)
    mine = ours(hf, batch, lambda lp: rloo_clipped_loss(lp, batch.old, advantages, batch.mask, EPS_LOW, EPS_HIGH))
    dloss, dgrad = differences(mine, theirs)
    assert dloss <= TOL and dgrad <= TOL, f"normalize {normalize}: |dloss| {dloss:.1e}, |dgrad| {dgrad:.1e}"
    with torch.no_grad():  # some replies' ratios are clipped and some are not, or the clip would go unchecked
        lp = completion_logprobs(logits_of(hf.model()), batch.prompt_ids, batch.completion_ids)
        clipped = sequence_clip_mask(lp, batch.old, advantages, batch.mask, EPS_LOW, EPS_HIGH)
    assert 0 < int(clipped.sum()) < len(clipped)


def test_the_frozen_batch_exercises_both_sides_of_the_clip_and_unequal_lengths(batch):
    """Otherwise equal losses for grpo, bnpo, dapo and dr_grpo, or for any epsilon, would prove nothing."""
    advantages = group_advantages(batch.rewards, G)
    assert clip_fraction(batch.old, batch.old, advantages, batch.mask, EPS_LOW, EPS_HIGH) == 0.0  # never at ratio 1
    ratio = (batch.ref - batch.old).exp()[batch.mask.bool()]  # ratios of a policy 0.3-noise away
    assert (
        (ratio < 1 - EPS_LOW).any()
        and (ratio > 1 + EPS_HIGH).any()
        and ((ratio > 1 - EPS_LOW) & (ratio < 1 + EPS_HIGH)).any()
    )
    assert 0 < clip_fraction(batch.ref, batch.old, advantages, batch.mask, EPS_LOW, EPS_HIGH) < 1
    assert len(set(batch.mask.sum(-1).tolist())) > 2
    logps = batch.ref.clone()
    values = {
        t: float(
            grpo_loss(logps, batch.mask, advantages, batch.old, loss_type=t, max_length=T, num_items=batch.num_items)
        )
        for t in LOSS_TYPES
    }
    assert len({round(v, 9) for v in values.values()}) == len(LOSS_TYPES), values


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_group_advantages_equal_trls_from_its_own_rollout_and_rewards(hf, scale):
    """TRL samples replies, scores them with a reward function, and normalises: ours from the same rewards agree.

    TRL's rewards and advantages are float32, so the bound is float32's: each
    advantage is at most ~2 in size, a few roundings of 6e-8 relative each.
    """
    draws = torch.Generator().manual_seed(3)
    seen = []

    def reward(completions, **_):
        seen.append(torch.randint(0, 3, (len(completions),), generator=draws).double().tolist())
        return seen[-1]

    sizes = dict(num_generations=G, per_device_train_batch_size=G * PROMPTS, max_completion_length=3)
    args = hf.GRPOConfig(output_dir=hf.out, disable_dropout=True, **PLAIN, **sizes, scale_rewards=scale)
    prompts = hf.datasets.Dataset.from_dict({"prompt": ["ab", "cd", "ef"]})
    trainer = hf.GRPOTrainer(model=hf.model(), reward_funcs=reward, args=args, train_dataset=prompts,
                             processing_class=hf.tokenizer)  # fmt: skip
    with torch.random.fork_rng():
        torch.manual_seed(0)
        out = trainer._generate_and_score_completions([{"prompt": p} for p in ["ab", "cd", "ef"] for _ in range(G)])
    mine = group_advantages(torch.tensor(seen[-1], dtype=torch.float64), G, scale)
    assert out["advantages"].shape == mine.shape
    assert float((out["advantages"].double() - mine).abs().max()) <= TOL


# ---------------------------------------------------------------------------------------------------------------------
# DPO


def dpo_batch():
    """3 pairs of 3-token prompts with replies of unequal lengths, right-padded to 9 tokens; chosen rows first."""
    gen = torch.Generator().manual_seed(11)
    ids = torch.randint(0, 256, (6, 9), generator=gen)
    ends = torch.tensor([9, 6, 8, 5, 9, 7])
    attention = (torch.arange(9)[None] < ends[:, None]).long()
    completion = attention.clone()
    completion[:, :3] = 0
    return ids, attention, completion


def dpo_conformance(hf, beta) -> tuple[float, float, float]:
    """DPO sigmoid against DPOTrainer._compute_loss (reference log-probs given, as precompute_ref_log_probs does):
    max |loss - TRL's| and |gradient - TRL's| from our log-probs, and |loss - TRL's| from TRL's own."""
    ids, attention, completion = dpo_batch()
    ref = torch.tensor([-40.0, -25.0, -33.0, -22.0, -39.0, -30.0], dtype=torch.float64)  # near the start's ~ -5.5/token
    args = hf.DPOConfig(output_dir=hf.out, **PLAIN, beta=beta, precompute_ref_log_probs=True)
    pairs = hf.datasets.Dataset.from_dict({"prompt": ["ab"], "chosen": ["c"], "rejected": ["d"]})
    trainer = hf.DPOTrainer(model=hf.model(), args=args, train_dataset=pairs, processing_class=hf.tokenizer)
    inputs = dict(input_ids=ids, attention_mask=attention, completion_mask=completion,
                  ref_chosen_logps=ref[:3], ref_rejected_logps=ref[3:])  # fmt: skip
    theirs = trainer._compute_loss(trainer.model, inputs, False)
    theirs.backward()
    with torch.no_grad():  # TRL's own per-token log-probs, through the forward it patched into the model
        labels = ids.masked_fill(completion == 0, -100)
        trl_seq = trainer.model(input_ids=ids, attention_mask=attention, labels=labels, fused_lm_head=True).log_probs
        trl_seq = trl_seq.sum(-1)
    model = hf.model()
    logits = model(input_ids=ids, attention_mask=attention).logits
    seq = sequence_logprob(token_logprobs(logits[:, :-1], ids[:, 1:]), completion[:, 1:])
    mine = dpo_loss(seq[:3], seq[3:], ref[:3], ref[3:], beta)
    mine.backward()
    formula = float((dpo_loss(trl_seq[:3], trl_seq[3:], ref[:3], ref[3:], beta) - theirs).abs())
    return (*differences((mine.detach(), grads(model)), (theirs.detach(), grads(trainer.model))), formula)


@pytest.mark.parametrize("beta", [0.1, 0.5])
def test_dpo_sigmoid_equals_trls_loss_and_gradient(hf, beta):
    dloss, dgrad, formula = dpo_conformance(hf, beta)
    assert dloss <= TOL and dgrad <= TOL, f"DPO beta {beta}: |dloss| {dloss:.1e}, |dgrad| {dgrad:.1e}"
    assert formula <= 1e-12, f"DPO beta {beta}: on TRL's own log-probs |dloss| {formula:.1e}"


def test_dpo_starts_at_ln_2_and_pulls_the_chosen_reply_up():
    policy = torch.tensor([-3.0, -7.0], dtype=torch.float64, requires_grad=True)  # chosen, rejected of one pair
    loss = dpo_loss(policy[:1], policy[1:], policy[:1].detach(), policy[1:].detach(), beta=0.1)
    assert float(loss.detach()) == pytest.approx(math.log(2), abs=1e-15)
    loss.backward()
    assert policy.grad[0] < 0 < policy.grad[1]  # descent raises the chosen reply and lowers the rejected one


# ---------------------------------------------------------------------------------------------------------------------
# The anchors' names in TRL's


@pytest.mark.parametrize("name", list(NAME_MAP))
def test_each_anchor_row_equals_trl_with_the_rows_settings(hf, batch, name):
    """The anchor's loss from scratch against TRL's with the row's GRPOConfig, given the anchor's advantages.

    A REINFORCE row (on-policy, -A log pi) has TRL's gradient but not its
    value: TRL logs the loss at ratio 1, which the row's ``differs`` states and
    this checks.
    """
    row = NAME_MAP[name]
    advantages = anchor_advantages(name, batch.rewards, G)
    reinforce = "reinforce" in row
    theirs = trl_grpo(hf, batch, advantages, on_policy=reinforce, **row["trl"])
    mine = ours(hf, batch, lambda lp: anchor_loss(name, lp, batch.mask, advantages, batch.old, batch.ref, max_length=T))
    dloss, dgrad = differences(mine, theirs)
    assert dgrad <= TOL, f"{name}: |dgrad| {dgrad:.1e}"
    if reinforce:
        ones = torch.ones(batch.mask.shape, dtype=torch.float64)
        logged = reinforce_loss(ones, batch.mask, advantages, how=row["reinforce"]["how"])
        assert float((theirs[0] - logged).abs()) <= TOL and dloss > 1e-3, "TRL's value is the ratio-1 surrogate"
    else:
        assert dloss <= TOL, f"{name}: |dloss| {dloss:.1e}"


def test_the_anchors_advantages_differ_from_trls_only_as_the_table_says(batch):
    trl = group_advantages(batch.rewards, G)
    minimind, cs336 = (
        anchor_advantages("minimind", batch.rewards, G),
        anchor_advantages("cs336_grpo_clip", batch.rewards, G),
    )
    moved = trl != 0
    assert torch.allclose(minimind[moved] / trl[moved], torch.full_like(trl[moved], math.sqrt(G / (G - 1))), rtol=1e-3)
    assert torch.allclose(cs336[moved] / trl[moved], torch.ones_like(trl[moved]), rtol=1e-3)
    assert not torch.equal(cs336, trl) and not torch.equal(minimind, trl)
    nanochat = anchor_advantages("nanochat", batch.rewards, G)
    assert torch.allclose(nanochat.view(-1, G).sum(-1), torch.zeros(PROMPTS, dtype=torch.float64), atol=1e-12)


# ---------------------------------------------------------------------------------------------------------------------
# From scratch, no TRL: hand-computed cases and properties


def test_gae_matches_a_hand_computed_case():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 9.0]])  # the 9 is padding: it must not count
    values = torch.tensor([[0.5, 0.6, 0.7], [0.2, 0.4, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    adv, ret = gae(rewards, values, mask, gamma=0.9, lam=0.8)
    # row 0: delta = (0 + .9*.6 - .5, 0 + .9*.7 - .6, 1 - .7) = (.04, .03, .3); A_t = delta_t + .72 A_{t+1}
    a0 = [0.04 + 0.72 * (0.03 + 0.72 * 0.3), 0.03 + 0.72 * 0.3, 0.3]
    # row 1 ends after 2 tokens: delta = (.9*.4 - .2, 1 - .4) = (.16, .6)
    a1 = [0.16 + 0.72 * 0.6, 0.6, 0.0]
    assert torch.allclose(adv, torch.tensor([a0, a1]), atol=1e-6)
    assert torch.allclose(ret, (adv + values) * mask, atol=1e-6)


def test_gae_with_gamma_and_lambda_1_is_the_return_to_go_minus_the_value():
    gen = torch.Generator().manual_seed(0)
    rewards, values = torch.randn(3, 5, generator=gen), torch.randn(3, 5, generator=gen)
    mask = torch.ones(3, 5)
    adv, _ = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    to_go = rewards.flip(-1).cumsum(-1).flip(-1)
    assert torch.allclose(adv, to_go - values, atol=1e-6)


def test_reinforce_gradient_is_minus_advantage_times_the_score():
    """One-step policy softmax(theta): grad of -(R - b) log pi(a) is -(R - b)(onehot(a) - pi), averaged."""
    theta = torch.tensor([0.3, -0.2, 0.5], dtype=torch.float64, requires_grad=True)
    actions, rewards, b = torch.tensor([0, 2, 2, 1]), torch.tensor([1.0, 0.0, 2.0, 0.5], dtype=torch.float64), 0.7
    logps = F.log_softmax(theta, -1)[actions][:, None]  # (4, 1): one token per reply
    reinforce_loss(logps, torch.ones(4, 1), rewards, b).backward()
    pi = F.softmax(theta.detach(), -1)
    expected = -sum((r - b) * (F.one_hot(a, 3).double() - pi) for a, r in zip(actions, rewards)) / 4
    assert torch.allclose(theta.grad, expected, atol=1e-12)


def test_rloo_baseline_is_the_mean_of_the_others():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0, 0.0])
    assert torch.allclose(leave_one_out_baseline(rewards, 3), torch.tensor([0.0, 0.5, 0.5, 1.5, 0.5, 2.0]))
    logps = torch.randn(6, 2, generator=torch.Generator().manual_seed(1), requires_grad=True)
    mask = torch.ones(6, 2)
    # RLOO's advantage is G / (G - 1) times the reward minus the group mean
    centred = rewards - rewards.view(2, 3).mean(-1).repeat_interleave(3)
    assert torch.allclose(rloo_loss(logps, mask, rewards, 3), reinforce_loss(logps, mask, 1.5 * centred), atol=1e-6)
    with pytest.raises(ValueError, match="at least 2"):
        leave_one_out_baseline(rewards, 1)


def test_ppo_value_loss_clips_and_the_policy_part_is_the_clipped_surrogate():
    logps = torch.log(torch.tensor([[0.5, 0.9]]))
    old = torch.log(torch.tensor([[0.25, 0.9]]))  # ratios 2 and 1
    adv, mask = torch.tensor([[1.0, -1.0]]), torch.ones(1, 2)
    values, old_values, returns = torch.tensor([[1.0, 0.1]]), torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, 0.0]])
    out = ppo_loss(logps, old, adv, mask, values, old_values, returns, eps=0.2, value_clip=0.2, vf_coef=0.5)
    assert float(out.policy) == pytest.approx((-1.2 + 1.0) / 2)  # token 1 clipped at 1.2; token 2 at ratio 1
    # token 1: max((1 - 0)^2, (0.2 - 0)^2) = 1 (the clip cannot lower the loss); token 2: 0.1^2, inside the clip
    assert float(out.value) == pytest.approx(0.5 * (1.0 + 0.01) / 2)
    assert float(out.total) == pytest.approx(float(out.policy) + 0.5 * float(out.value))
    assert out.clip_fraction == 0.5


def test_group_advantages_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0], dtype=torch.float64)
    std = math.sqrt(4 * 0.25 / 3)  # the G - 1 denominator
    expected = torch.tensor([0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0], dtype=torch.float64)
    assert torch.allclose(group_advantages(rewards, 4, "none"), expected)
    assert torch.allclose(
        group_advantages(rewards, 4), expected / (torch.tensor([std] * 4 + [0.0] * 4) + ADVANTAGE_EPS)
    )
    assert torch.allclose(group_advantages(rewards, 4, "batch"), expected / (rewards.std() + ADVANTAGE_EPS))
    with pytest.raises(ValueError, match="unknown scale"):
        group_advantages(rewards, 4, "std")


def test_the_normalisations_agree_when_replies_are_equally_long_and_part_when_not():
    gen = torch.Generator().manual_seed(2)
    per_token = torch.randn(4, 5, generator=gen)
    full = torch.ones(4, 5)
    values = [
        aggregate(per_token, full, h, max_length=5, num_items=20) for h in ("sequence", "token", "constant", "items")
    ]
    assert all(torch.allclose(v, values[0]) for v in values)
    ragged = full.clone()
    ragged[0, 1:] = 0  # one reply of 1 token, three of 5
    assert not torch.allclose(aggregate(per_token, ragged, "sequence"), aggregate(per_token, ragged, "token"))
    # grpo's length bias: the short reply's single token weighs 1/4 against 1/16 for bnpo
    weights = torch.autograd.functional.jacobian(lambda x: aggregate(x, ragged, "sequence"), per_token)
    assert float(weights[0, 0]) == pytest.approx(1 / 4) and float(weights[1, 0]) == pytest.approx(1 / 20)


def test_bad_settings_get_one_clear_line():
    logps, mask, adv = torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(2)
    with pytest.raises(ValueError, match="unknown loss_type"):
        grpo_loss(logps, mask, adv, loss_type="ppo")
    with pytest.raises(ValueError, match="beta must be >= 0"):
        grpo_loss(logps, mask, adv, beta=-0.1)
    with pytest.raises(ValueError, match="needs ref_logps"):
        grpo_loss(logps, mask, adv, beta=0.04)
    with pytest.raises(ValueError, match="needs max_length"):
        grpo_loss(logps, mask, adv, loss_type="dr_grpo")
    with pytest.raises(ValueError, match="beta must be > 0"):
        dpo_loss(torch.zeros(1), torch.zeros(1), torch.zeros(1), torch.zeros(1), beta=0)


def test_completion_logprobs_reads_the_books_gpt():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=20, block_size=12, n_layer=1, n_head=2, n_embd=16)).eval()
    ids = torch.randint(0, 20, (2, 7), generator=torch.Generator().manual_seed(0))
    got = completion_logprobs(model, ids[:, :3], ids[:, 3:])
    logits, _ = model(ids)
    by_hand = torch.stack([F.log_softmax(logits[:, 2 + t], -1)[torch.arange(2), ids[:, 3 + t]] for t in range(4)], 1)
    assert torch.allclose(got, by_hand, atol=1e-6)


# ---------------------------------------------------------------------------------------------------------------------
# KL estimators against the exact KL


def test_exact_kl_by_hand():
    p, q = torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.25, 0.25, 0.5])
    assert float(exact_kl(p, q)) == pytest.approx(math.log(2))
    assert float(exact_kl(p, p)) == 0.0
    with pytest.raises(ValueError, match="infinite"):
        exact_kl(q, p)


def test_k1_and_k3_are_unbiased_and_k2_is_not():
    """Exact expectations over the categories, and a seeded sample of 20,000 draws within 4 standard errors."""
    p = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    q = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    stats = estimator_stats(p, q, samples=20_000, seed=0)
    assert set(stats) == set(KL_ESTIMATORS)
    for name in ("k1", "k3"):
        s = stats[name]
        assert abs(s.bias) < 1e-12
        assert abs(s.sample_mean - s.kl) < 4 * s.standard_error
    k2 = stats["k2"]
    assert abs(k2.bias) > 0.1 * k2.kl  # k2 is off by more than a tenth of the KL here
    assert abs(k2.sample_mean - k2.expected) < 4 * k2.standard_error
    assert abs(k2.sample_mean - k2.kl) > 4 * k2.standard_error  # and the sample shows it
    assert stats["k3"].variance < stats["k1"].variance and min(s.expected for s in stats.values()) > 0


def test_close_distributions_make_k3_much_less_noisy_than_k1():
    p = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    q = torch.tensor([0.38, 0.31, 0.21, 0.10], dtype=torch.float64)
    stats = estimator_stats(p, q, samples=1000, seed=1)
    assert stats["k3"].variance < 0.01 * stats["k1"].variance
    assert abs(stats["k2"].bias) < 0.1 * stats["k2"].kl  # near q = p, k2's bias fades
