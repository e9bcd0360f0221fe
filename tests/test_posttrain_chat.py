"""The chat format of chapter 12: reserved tokens, the loss mask, a grown vocabulary that survives a checkpoint."""

from dataclasses import asdict

import pytest
import torch
from helpers import SMALL_GPT

from gputrain.model import GPT, GPTConfig
from gputrain.posttrain import IGNORE, SPECIAL_TOKENS, ChatFormat, as_messages, grow_vocab, masked_cross_entropy

torch.set_num_threads(1)

CONVERSATION = [
    {"role": "system", "content": "You add numbers."},
    {"role": "user", "content": "What is 2 + 3? <|end|> ünïcode"},
    {"role": "assistant", "content": "Answer: 5"},
    {"role": "user", "content": "And 4 + 4?"},
    {"role": "assistant", "content": "Answer: 8"},
]


def small_gpt(vocab_size=256, **kw) -> GPT:
    torch.manual_seed(0)
    sizes = {k: v for k, v in SMALL_GPT.items() if k != "batch_size"}
    return GPT(GPTConfig(vocab_size=vocab_size, **sizes, **kw))


def test_a_conversation_round_trips_and_text_cannot_forge_a_reserved_token():
    fmt = ChatFormat()
    enc = fmt.encode(CONVERSATION)
    assert fmt.decode_messages(enc.ids) == CONVERSATION
    assert fmt.vocab_size == 256 + len(SPECIAL_TOKENS) == 260
    # the user typed "<|end|>": it stays seven bytes, and the conversation still has exactly five turns
    assert sum(i == fmt.end_id for i in enc.ids) == 5
    assert all(i < 256 for i in fmt.encode([{"role": "assistant", "content": "<|end|><|user|>"}]).ids[1:-1])
    assert fmt.decode(enc.ids).startswith("<|system|>You add numbers.<|end|><|user|>What is 2 + 3?")
    prompt = fmt.encode_prompt(CONVERSATION[:2])
    assert prompt[-1] == fmt.role_id["assistant"] and prompt == enc.ids[: len(prompt)]
    assert fmt.reply([*b"Answer: 5", fmt.end_id, *b"junk"]) == "Answer: 5"


def test_the_mask_counts_the_assistant_content_and_its_end_of_turn_only():
    fmt = ChatFormat()
    enc = fmt.encode(CONVERSATION)
    counted = [i for i, m in zip(enc.ids, enc.mask) if m]
    assert counted == [*b"Answer: 5", fmt.end_id, *b"Answer: 8", fmt.end_id]
    # no role token, no system or user byte is ever counted
    assert not any(m for i, m in zip(enc.ids, enc.mask) if i in fmt.role_id.values())
    inputs, targets = enc.tensors()
    assert inputs.shape == targets.shape == (len(enc.ids) - 1,)
    assert targets[targets != IGNORE].tolist() == counted


def test_a_masked_token_gets_exactly_zero_gradient():
    fmt = ChatFormat()
    model = grow_vocab(small_gpt(), fmt.vocab_size)
    short = [{"role": "user", "content": "2+3"}, {"role": "assistant", "content": "Answer: 5"}] * 2
    inputs, targets = fmt.encode(short, block_size=model.cfg.block_size).tensors()
    inputs, targets = inputs[None], targets[None]  # (1, 31): user bytes skipped, assistant bytes counted
    logits, _ = model(inputs)
    logits.retain_grad()
    loss = masked_cross_entropy(logits, targets)
    loss.backward()
    skipped = targets[0] == IGNORE
    assert skipped.any() and (~skipped).any()
    assert torch.equal(logits.grad[0, skipped], torch.zeros_like(logits.grad[0, skipped]))
    assert (logits.grad[0, ~skipped].abs().sum(-1) > 0).all()
    # the loss is the mean over the counted positions alone
    logp = torch.log_softmax(logits[0, ~skipped].detach(), -1)
    manual = -logp.gather(1, targets[0, ~skipped, None]).mean()
    torch.testing.assert_close(loss.detach(), manual)


@pytest.mark.parametrize(
    "messages, block_size, says",
    [
        ([{"role": "bot", "content": "hi"}], None, "unknown role 'bot'; use one of: system, user, assistant"),
        ([{"role": "user", "content": ""}, {"role": "assistant", "content": "x"}], None, "empty content"),
        ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x" * 40}], 32, "larger block_size"),
        ([{"role": "user", "content": "hi"}], None, "no assistant message"),
        ([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}], None, "only the first"),
        ([], None, "non-empty list"),
        ([{"role": "user"}], None, '"role" and "content"'),
    ],
)
def test_bad_conversations_get_one_line_that_names_the_fix(messages, block_size, says):
    with pytest.raises(ValueError) as err:
        ChatFormat().encode(messages, block_size=block_size)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_the_longest_conversation_that_fits_is_block_size_plus_one_tokens():
    fmt = ChatFormat()
    fits = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "x" * 28}]  # 3 + 30 = 33 tokens
    assert len(fmt.encode(fits, block_size=32).ids) == 33
    fits[1]["content"] += "x"
    with pytest.raises(ValueError, match="34 tokens"):
        fmt.encode(fits, block_size=32)


def test_records_become_messages():
    pair = {"prompt": "2+2?", "response": "Answer: 4"}
    assert as_messages(pair) == [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "Answer: 4"}]
    assert as_messages({"messages": CONVERSATION}) is CONVERSATION
    with pytest.raises(ValueError, match='"prompt" and "response"'):
        as_messages({"prompt": "x"})


@pytest.mark.parametrize("tied", [True, False])
def test_a_grown_vocabulary_keeps_every_old_logit_and_starts_new_tokens_at_the_mean(tied):
    model = small_gpt(tie_embeddings=tied).eval()
    grown = grow_vocab(model, 260, seed=1).eval()
    x = torch.randint(0, 256, (2, 16))
    assert torch.equal(grown(x)[0][..., :256], model(x)[0])  # byte text: the same model exactly
    new = grown.wte.weight[256:].detach()
    offset = new - model.wte.weight.detach().mean(0)
    assert 0.01 < offset.std().item() < 0.03  # the mean plus N(0, 0.02^2), not a copy of one row
    assert grown.cfg.vocab_size == 260 and grown.head.weight.shape == (260, model.cfg.n_embd)
    assert (grown.head.weight is grown.wte.weight) == tied
    with pytest.raises(ValueError, match="cannot shrink"):
        grow_vocab(model, 100)


def test_a_grown_vocabulary_survives_save_and_load(tmp_path):
    from gputrain.train.checkpoint import save_checkpoint
    from gputrain.train.generate import load_model

    grown = grow_vocab(small_gpt(), 260)
    opt = torch.optim.SGD(grown.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    progress = {"losses": [], "lrs": [], "grad_norms": []}
    save_checkpoint(tmp_path, 1, grown, opt, sched, progress, model_config=asdict(grown.cfg))
    loaded, _ = load_model(tmp_path)
    x = torch.tensor([[257, *b"hi", 259, 258]])
    assert loaded.cfg.vocab_size == 260
    assert torch.equal(loaded(x)[0], grown.eval()(x)[0])
