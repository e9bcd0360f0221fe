"""The whole training loop in twenty lines of gputrain + Accelerate (the book's introduction).

Run it: python companion/examples/loop.py  (or: accelerate launch companion/examples/loop.py)
"""

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader

from gputrain.data import ByteTokenizer, TokenDataset, infinite, python_corpus
from gputrain.model import GPT, GPTConfig

torch.manual_seed(0)
accelerator = Accelerator()  # CPU, one GPU, or many: the launcher decides
tokens = torch.tensor(ByteTokenizer().encode(python_corpus(max_bytes=300_000)))
loader = DataLoader(TokenDataset(tokens, block_size=64), batch_size=32, shuffle=True)
model = GPT(GPTConfig(vocab_size=256, block_size=64, n_layer=2, n_head=4, n_embd=64))
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

for step, (x, y) in zip(range(201), infinite(loader)):
    logits, loss = model(x, y)  # 1. predict, 2. measure the error
    accelerator.backward(loss)  # 3. find the direction (backpropagation)
    optimizer.step()  # 4. adjust every weight a little
    optimizer.zero_grad()  # 5. forget this step's gradient, and repeat
    if step % 50 == 0:
        accelerator.print(f"step {step:3d}  loss {loss.item():.3f}")
