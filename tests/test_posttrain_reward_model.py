"""Issue 33, item 4: InstructGPT in miniature, the Bradley-Terry reward model on the training loop.

The gold preference is a reward the model never sees: of two replies "I pick
<digit>.", the larger digit wins.  Some digit pairs are held out entirely, so
the held-out accuracy asks whether the model learned one score per reply that
ranks the digits (the Bradley-Terry assumption), not the training pairs.
"""

import itertools
import math
import os
import time
from types import SimpleNamespace

import pytest
import torch
from helpers import snapshot

from gputrain.model import GPT, GPTConfig
from gputrain.posttrain import (
    ChatFormat,
    RewardModel,
    as_reward,
    bradley_terry_loss,
    chat_model,
    load_reward_model,
    pairwise_accuracy,
    reward_pairs,
    score_replies,
    train_reward_model,
)
from gputrain.train import TrainConfig, read_checkpoint, train
from gputrain.train.checkpoint import CheckpointError

torch.set_num_threads(1)
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # TRL never reaches the Hub here
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

SHAPE = dict(vocab_size=256, block_size=48, n_layer=1, n_head=2, n_embd=32)
FAST = dict(batch_size=16, eval_interval=0, warmup_steps=2, progress=False)
PROMPTS = ["Pick a number.", "Say a digit.", "Your number?", "Give me one."]
HELD_OUT = {(7, 2), (9, 4), (5, 1), (8, 3), (6, 0), (9, 6), (4, 1), (8, 5)}  # (larger, smaller), never trained on


def records(held_out: bool) -> list[dict]:
    """Every prompt with every pair of distinct digits whose membership of HELD_OUT is ``held_out``."""
    return [
        {"prompt": p, "chosen": f"I pick {hi}.", "rejected": f"I pick {lo}."}
        for p in PROMPTS
        for lo, hi in itertools.combinations(range(10), 2)
        if ((hi, lo) in HELD_OUT) == held_out
    ]


TRAIN, TEST = records(False), records(True)


def test_the_training_pairs_imply_every_held_out_preference():
    """A scalar score can rank a held-out pair only through the training pairs: each is linked by one between."""
    trained = {(hi, lo) for lo, hi in itertools.combinations(range(10), 2)} - HELD_OUT
    for hi, lo in HELD_OUT:
        assert any((hi, k) in trained and (k, lo) in trained for k in range(10)), (hi, lo)


def base() -> GPT:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return GPT(GPTConfig(**SHAPE))


def untrained(seed: int = 0, head_std: float = 0.0) -> RewardModel:
    rm = RewardModel(chat_model(base(), ChatFormat(), seed=seed))
    if head_std:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            torch.nn.init.normal_(rm.score.weight, std=head_std)  # scores far from 0, of both signs
    return rm


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rm")
    start = time.perf_counter()
    settings = dict(FAST, eval_interval=60, val_fraction=0.1, max_steps=60, checkpoint_dir=str(folder))
    result = train_reward_model(base(), TRAIN, **settings)
    return SimpleNamespace(result=result, folder=folder, seconds=time.perf_counter() - start)


# ---------------------------------------------------------------------------------------------------------------------
# the loss


def test_the_loss_is_the_negative_log_likelihood_of_the_preferences_by_hand():
    chosen = torch.tensor([2.0, -1.0, 0.5, 3.0], dtype=torch.float64)
    rejected = torch.tensor([1.0, 1.0, 0.5, -4.0], dtype=torch.float64)
    p_chosen = 1 / (1 + torch.exp(-(chosen - rejected)))  # Bradley-Terry: P(chosen beats rejected)
    assert bradley_terry_loss(chosen, rejected).item() == pytest.approx(-torch.log(p_chosen).mean().item(), rel=1e-12)
    assert bradley_terry_loss(chosen, chosen).item() == pytest.approx(math.log(2), rel=1e-12)  # every pair a tie
    loss = bradley_terry_loss(chosen, rejected).item()
    assert bradley_terry_loss(chosen + 7, rejected + 7).item() == pytest.approx(loss)  # only differences count
    with pytest.raises(ValueError, match="two \\(B,\\) tensors of one shape"):
        bradley_terry_loss(chosen, rejected[:3])


def test_the_loss_and_its_gradient_equal_trls_reward_trainer_on_the_books_reward_model(tmp_path):
    reason = "TRL is the reference the reward model's loss is checked against: pip install -e 'companion[book]'"
    for name in ("trl", "transformers", "datasets", "tokenizers"):
        pytest.importorskip(name, reason=reason)
    import datasets
    from tokenizers import Tokenizer, models
    from transformers import GPT2Config, GPT2ForSequenceClassification, PreTrainedTokenizerFast
    from trl import RewardConfig, RewardTrainer

    datasets.disable_progress_bars()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.BPE(vocab={chr(65 + i): i for i in range(8)}, merges=[])),
        eos_token="H", pad_token="G",
    )  # fmt: skip
    config = GPT2Config(vocab_size=8, n_positions=8, n_embd=8, n_layer=1, n_head=1, num_labels=1, pad_token_id=6,
                        bos_token_id=7, eos_token_id=7)  # fmt: skip
    args = RewardConfig(output_dir=str(tmp_path), bf16=False, report_to=[], dataloader_pin_memory=False,
                        activation_checkpointing=False)  # fmt: skip
    trainer = RewardTrainer(
        model=GPT2ForSequenceClassification(config), args=args, processing_class=tokenizer,
        train_dataset=datasets.Dataset.from_dict({"chosen": ["AB"], "rejected": ["CD"]}),
    )  # fmt: skip
    rm = untrained(head_std=50.0).double()
    fmt = ChatFormat()
    x, y = reward_pairs(TRAIN[:6], fmt, rm.block_size)[0][:]  # (6, 2, T)
    ids = torch.cat([x[:, 0], x[:, 1]])  # TRL's batch: the chosen rows first, then the rejected
    scores = rm.pair_scores(x, y)  # (6, 2)

    def as_hf(**inputs):  # the book's scores where TRL reads a sequence classifier's logits
        assert torch.equal(inputs["input_ids"], ids)
        return SimpleNamespace(logits=torch.cat([scores[:, 0], scores[:, 1]])[:, None])

    theirs = trainer.compute_loss(as_hf, {"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    (their_grad,) = torch.autograd.grad(theirs, rm.score.weight, retain_graph=True)
    mine = rm(x, y)[1]
    (my_grad,) = torch.autograd.grad(mine, rm.score.weight)
    assert scores.std() > 1  # margins far from 0 and of both signs: the loss is not near ln 2
    assert abs((mine - theirs).item()) < 1e-12 and float((my_grad - their_grad).abs().max()) < 1e-12


# ---------------------------------------------------------------------------------------------------------------------
# the model


def test_scores_are_read_at_each_conversations_end_of_turn_whatever_the_padding():
    rm, fmt = untrained(head_std=50.0).eval(), ChatFormat()
    pairs = TRAIN[:5] + [{"prompt": "Q", "chosen": "a much longer reply here", "rejected": "b"}]
    x, y = reward_pairs(pairs, fmt, 48)[0][:]
    batch = rm.pair_scores(x, y)  # (6, 2), padded to the longest conversation (in a seeded shuffle's order)
    conversations = [
        fmt.encode([{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r[k]}]).ids
        for r in pairs
        for k in ("chosen", "rejected")
    ]
    assert all(c[-1] == fmt.end_id for c in conversations)
    alone = torch.stack([rm.scores([c]) for c in conversations]).view(6, 2)  # each unpadded, on its own
    together = rm.scores(conversations).view(6, 2)
    assert len(set(alone[:, 0].tolist())) == 6  # every chosen reply scores apart: rows match by their score

    def by_chosen(s):
        return s[s[:, 0].argsort()]

    assert torch.allclose(by_chosen(batch), by_chosen(alone), atol=1e-4)
    assert torch.allclose(together, alone, atol=1e-4)
    with pytest.raises(ValueError, match="conversation 0 is 49 tokens; the reward model reads 1 to 48"):
        rm.scores([[1] * 49])


def test_an_untrained_reward_model_scores_every_pair_a_tie():
    accuracy = pairwise_accuracy(untrained(), TEST, ChatFormat())
    assert accuracy.value == 0.5 and accuracy.low < 0.5 < accuracy.high  # ties count half


def test_the_reward_model_learns_the_gold_preference_on_pairs_it_never_saw(trained):
    result = trained.result
    assert result.losses[0] == pytest.approx(math.log(2), abs=1e-6)  # the zero head: every score 0 at step 0
    assert sum(result.losses[-10:]) / 10 < 0.6 < result.losses[0]
    accuracy = pairwise_accuracy(result.model, TEST, ChatFormat())
    print(f"held-out pairwise accuracy {accuracy} over {len(TEST)} pairs after {trained.seconds:.1f} s")
    assert accuracy.low > 0.5 and accuracy.value >= 0.9
    reward = as_reward(result.model, ChatFormat())
    by_digit = score_replies(reward, ["Pick a number."] * 10, [f"I pick {d}." for d in range(10)])
    assert by_digit[9] > by_digit[0]  # the ends of the gold order, one reply at a time


def test_the_validation_pairs_are_the_ones_reward_pairs_holds_out(trained):
    result = trained.result
    train_set, val_set = reward_pairs(TRAIN, ChatFormat(), SHAPE["block_size"], 0.1, result.config.seed)
    assert len(val_set) == round(0.1 * len(TRAIN)) and len(train_set) + len(val_set) == len(TRAIN)
    with torch.no_grad():
        loss = result.model.eval()(val_set.x, val_set.y)[1].item()
    assert result.val_losses == [(60, pytest.approx(loss, abs=1e-5))]  # the loop's own validation pass


def test_the_checkpoint_loads_back_as_the_trained_reward_model(trained):
    rm, fmt = load_reward_model(trained.folder)
    x, y = reward_pairs(TEST, fmt, rm.block_size)[0][:]
    assert torch.equal(rm.pair_scores(x, y), trained.result.model.eval().pair_scores(x, y))
    assert read_checkpoint(trained.folder).model_config["posttrain"]["stage"] == "reward_model"


def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path):
    straight = train_reward_model(base(), TRAIN, max_steps=6, **FAST)
    train_reward_model(base(), TRAIN, max_steps=3, schedule_steps=6, checkpoint_dir=str(tmp_path / "c"), **FAST)
    resumed = train_reward_model(data=TRAIN, resume_from=str(tmp_path / "c"), max_steps=6)
    assert resumed.resumed_step == 3 and resumed.losses == straight.losses


# ---------------------------------------------------------------------------------------------------------------------
# the reward PPO maximises


def test_as_reward_follows_trls_convention_in_batches_without_gradients():
    rm, fmt = untrained(head_std=0.5).train(), ChatFormat()
    reward = as_reward(rm, fmt)
    prompts = ["Pick a number."] * 3 + [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]]
    completions = ["I pick 3.", "", "I pick 9.", [{"role": "assistant", "content": "Hello"}]]
    values = reward(prompts=prompts, completions=completions, answers=[1, 2, 3, 4])  # extra columns are ignored
    assert isinstance(values, list) and len(values) == 4 and all(type(v) is float for v in values)
    checked = score_replies(reward, prompts, completions)  # the rewards module's own checks pass
    assert checked.shape == (4,) and checked.dtype == torch.float64 and rm.training  # the mode is restored
    ids = fmt.encode([{"role": "user", "content": "Pick a number."}, {"role": "assistant", "content": "I pick 3."}]).ids
    assert values[0] == pytest.approx(rm.eval().scores([ids]).item(), abs=1e-6)
    with pytest.raises(ValueError, match="reward reward_model raised ValueError: 1 completions for 2 prompts"):
        score_replies(reward, ["a", "b"], ["c"])


# ---------------------------------------------------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize(
    "data, message",
    [
        ([], r"data is an empty list; give at least one"),
        ([{"prompt": "x", "rejected": "y"}], r'record:1: a preference record needs "prompt", "chosen" and "rejected"'),
        ([{"prompt": "x", "chosen": "y", "rejected": 3}], r'record:1: "rejected" must be non-empty text'),
        ({"prompt": "x"}, r"data must be a JSONL path or a list of preference records, got dict"),
    ],
)
def test_bad_data_is_one_line_and_writes_nothing(tmp_path, data, message):
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match=message) as info:
        train_reward_model(base(), data, checkpoint_dir=str(tmp_path / "o"), **FAST)
    assert len(str(info.value).splitlines()) == 1 and snapshot(tmp_path) == before


def test_a_reward_model_is_no_chat_model_to_start_from(trained):
    with pytest.raises(CheckpointError, match="is a reward model, not a chat model; load it with load_reward_model"):
        train_reward_model(trained.folder, TRAIN, **FAST)


def test_a_checkpoint_that_is_not_a_reward_model_is_refused(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("abc " * 400)
    train(TrainConfig(**SHAPE, data=str(text), max_steps=1, batch_size=2, checkpoint_dir=str(tmp_path / "p"),
                      progress=False, eval_interval=0, warmup_steps=0))  # fmt: skip
    with pytest.raises(CheckpointError, match="is not a reward model; train one with train_reward_model"):
        load_reward_model(tmp_path / "p")
    with pytest.raises(ValueError, match="train_reward_model needs a base"):
        train_reward_model(base(), None)
