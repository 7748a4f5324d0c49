"""A plain PyTorch training script: a small GPT-style language model on random tokens.

Nothing in it knows about tensorpager. Train it below its natural peak with
one variable and no code change (after ``pip install --no-build-isolation .``)::

    PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager,manage:activations,budget:0.5" python examples/train_gpt.py

``budget:0.5`` is half of the first step's peak; tensorpager prints one line at
exit with the budget, the peak it kept to and what it moved. Each step prints
its loss also as ``float.hex()``, so two runs can be compared bit for bit.
Without a GPU, tensorpager manages the CPU allocator over a simulated device.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from torch import nn


class GPT(nn.Module):
    """Token and position embeddings, pre-norm causal transformer blocks, a head tied to the embedding."""

    def __init__(self, vocab: int, width: int, depth: int, heads: int, context: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.zeros(context, width))
        block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        nn.init.normal_(self.embed.weight, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(n, device=tokens.device)
        h = self.blocks(self.embed(tokens) + self.position[:n], mask=mask, is_causal=True)
        return self.norm(h) @ self.embed.weight.t()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--context", type=int, default=128)
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    vocab = 512
    model = GPT(vocab, width=128, depth=6, heads=4, context=args.context).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    data = torch.Generator().manual_seed(1)

    print(f"training on {device}: batch {args.batch}, context {args.context}, {args.steps} steps")
    for step in range(args.steps):
        start = time.perf_counter()
        tokens = torch.randint(0, vocab, (args.batch, args.context + 1), generator=data).to(device)
        logits = model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        elapsed = (time.perf_counter() - start) * 1e3
        print(f"  step {step}: loss {loss.item():.4f} ({loss.item().hex()}), {elapsed:.0f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
