"""The chat format: reserved tokens for roles and turns, and a loss mask for the assistant (chapter 12).

A conversation is a list of messages ``{"role": ..., "content": ...}``.  Each
turn is written as a role token, the content's text tokens, and an
end-of-turn token::

    <|system|>You add.<|end|><|user|>2+3?<|end|><|assistant|>Answer: 5<|end|>

The four reserved tokens are new ids after the text tokenizer's vocabulary
(256 + 0 ... 256 + 3 for the byte tokenizer), so no text can produce one: a
user who types ``<|end|>`` gets those seven bytes.  :func:`grow_vocab` gives a
pretrained GPT the rows for them.  The loss mask counts only what the model
should learn to say: the assistant's content and the end-of-turn that closes
it, never the prompt, the role tokens or the other speakers' turns.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..data import ByteTokenizer
from ..model import GPT

ROLES = ("system", "user", "assistant")
SPECIAL_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>")
IGNORE = -100  # the target of a position the loss skips (F.cross_entropy's default ignore_index)


@dataclass
class Encoded:
    """A conversation as token ids and, per id, whether the loss counts it."""

    ids: list[int]
    mask: list[bool]  # True where the token is the assistant's to produce

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs (T,) and targets (T,) for next-token training, T = len(ids) - 1.

        A target is the next id where the mask counts it and :data:`IGNORE` elsewhere.
        """
        ids = torch.tensor(self.ids, dtype=torch.long)  # (T + 1,)
        counted = torch.tensor(self.mask[1:], dtype=torch.bool)  # (T,)
        return ids[:-1], torch.where(counted, ids[1:], torch.full_like(ids[1:], IGNORE))


class ChatFormat:
    """Encode and decode conversations with reserved role and end-of-turn tokens (chapter 12).

    ``tokenizer`` encodes the content (the byte tokenizer by default; a BPE
    works too); the reserved tokens take the ids right after its vocabulary.
    """

    def __init__(self, tokenizer=None):
        self.tokenizer = tokenizer if tokenizer is not None else ByteTokenizer()
        self.text_vocab_size = int(self.tokenizer.vocab_size)
        self.special = {name: self.text_vocab_size + i for i, name in enumerate(SPECIAL_TOKENS)}
        self.role_id = {role: self.special[f"<|{role}|>"] for role in ROLES}
        self.end_id = self.special["<|end|>"]

    @property
    def vocab_size(self) -> int:
        """Text tokens plus the reserved ones: what the model's embedding and head need."""
        return self.text_vocab_size + len(SPECIAL_TOKENS)

    def encode(self, messages, block_size: int | None = None) -> Encoded:
        """Ids and loss mask of a whole conversation, which must hold at least one assistant turn.

        ``block_size``: the model's context; a conversation of N tokens trains
        on N - 1 inputs, so N may be at most ``block_size + 1``.
        """
        check_messages(messages)
        if not any(m["role"] == "assistant" for m in messages):
            raise ValueError(
                "the conversation has no assistant message, so the loss would count nothing; "
                "add the assistant's reply as the last message"
            )
        ids, mask = self._turns(messages)
        if block_size is not None and len(ids) > block_size + 1:
            raise ValueError(
                f"the conversation is {len(ids)} tokens, more than the model's context of {block_size} + 1; "
                "shorten its messages or train a model with a larger block_size"
            )
        return Encoded(ids, mask)

    def encode_prompt(self, messages, block_size: int | None = None) -> list[int]:
        """Ids that ask the model for the next assistant turn: the conversation, then ``<|assistant|>``."""
        check_messages(messages)
        ids = self._turns(messages)[0] + [self.role_id["assistant"]]
        if block_size is not None and len(ids) >= block_size:
            raise ValueError(
                f"the prompt is {len(ids)} tokens and leaves no room for a reply in the model's context of "
                f"{block_size}; shorten the messages or use a model with a larger block_size"
            )
        return ids

    def _turns(self, messages) -> tuple[list[int], list[bool]]:
        ids: list[int] = []
        mask: list[bool] = []
        for m in messages:
            content = self.tokenizer.encode(m["content"])
            learn = m["role"] == "assistant"
            ids += [self.role_id[m["role"]], *content, self.end_id]
            mask += [False] + [learn] * (len(content) + 1)  # the role token is given, never learned
        return ids, mask

    def decode(self, ids) -> str:
        """Text of ids, with each reserved token written as its name."""
        out, run = [], []
        names = {v: k for k, v in self.special.items()}
        for i in map(int, ids):
            if i in names:
                out += [self.tokenizer.decode(run), names[i]]
                run = []
            else:
                run.append(i)
        return "".join(out + [self.tokenizer.decode(run)])

    def decode_messages(self, ids) -> list[dict]:
        """The messages a sequence of ids holds (the inverse of :meth:`encode`); a reply cut off ends the list."""
        roles = {v: k for k, v in self.role_id.items()}
        messages: list[dict] = []
        role, run = None, []
        for i in map(int, ids):
            if i in roles:
                role, run = roles[i], []
            elif i == self.end_id and role is not None:
                messages.append({"role": role, "content": self.tokenizer.decode(run)})
                role = None
            elif role is not None:
                run.append(i)
        if role is not None and run:
            messages.append({"role": role, "content": self.tokenizer.decode(run)})
        return messages

    def reply(self, ids) -> str:
        """The text of a generated assistant turn: the ids up to the first end-of-turn (or all of them)."""
        ids = [int(i) for i in ids]
        if self.end_id in ids:
            ids = ids[: ids.index(self.end_id)]
        return self.tokenizer.decode([i for i in ids if i < self.text_vocab_size])


def check_messages(messages) -> None:
    """Refuse a conversation the format cannot encode, with one line that names the fix."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ValueError('messages must be a non-empty list of {"role": ..., "content": ...} dicts')
    for n, m in enumerate(messages, 1):
        if not isinstance(m, dict) or not {"role", "content"} <= set(m):
            raise ValueError(f'message {n} must be a dict with "role" and "content"; got {m!r:.80}')
        if m["role"] not in ROLES:
            raise ValueError(f"message {n} has unknown role {m['role']!r}; use one of: {', '.join(ROLES)}")
        if m["role"] == "system" and n != 1:
            raise ValueError(f"message {n} is a system message; only the first message may be one")
        if not isinstance(m["content"], str) or not m["content"]:
            raise ValueError(f"message {n} ({m['role']}) has empty content; give it some text or leave it out")


def as_messages(record: dict) -> list[dict]:
    """A training record as messages: ``{"messages": [...]}`` as is, ``{"prompt", "response"}`` as two turns."""
    if isinstance(record, dict) and "messages" in record:
        return record["messages"]
    if isinstance(record, dict) and {"prompt", "response"} <= set(record):
        return [{"role": "user", "content": record["prompt"]}, {"role": "assistant", "content": record["response"]}]
    raise ValueError('a record needs "messages", or "prompt" and "response"')


def masked_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the counted targets only: (B, T, V) logits, (B, T) targets with :data:`IGNORE`.

    A skipped position adds nothing to the loss, so its logits get a gradient of exactly zero.
    """
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE)


@torch.no_grad()
def grow_vocab(model: GPT, vocab_size: int, *, seed: int = 0) -> GPT:
    """A copy of ``model`` with ``vocab_size`` tokens: every old weight kept, new embedding and head rows added.

    New rows are the mean of the old rows plus N(0, 0.02^2) noise (the GPT's
    own init scale), seeded.  The mean makes a new token's first logit the
    average of the old ones (Hewitt, 2021): training starts where the old
    model was instead of with a token it predicts at random strength; the
    noise keeps the new tokens apart from each other.  The returned GPT's
    ``cfg.vocab_size`` is the new size, so a checkpoint of it records the
    grown shape and loads back.
    """
    old = model.cfg.vocab_size
    if vocab_size < old:
        raise ValueError(f"grow_vocab cannot shrink the vocabulary from {old} to {vocab_size}; pass >= {old}")
    p = model.wte.weight
    grown = GPT(dataclasses.replace(model.cfg, vocab_size=vocab_size)).to(device=p.device, dtype=p.dtype)
    state = {k: v for k, v in model.state_dict().items() if k not in ("wte.weight", "head.weight")}
    grown.load_state_dict(state, strict=False)
    gen = torch.Generator().manual_seed(seed)
    tables = [(grown.wte.weight, model.wte.weight)]
    if not model.cfg.tie_embeddings:
        tables.append((grown.head.weight, model.head.weight))
    for new, src in tables:
        noise = torch.randn(vocab_size - old, src.shape[1], generator=gen) * 0.02  # (k, C)
        new[:old] = src
        new[old:] = src.mean(0, keepdim=True) + noise.to(device=src.device, dtype=src.dtype)
    return grown.train(model.training)
