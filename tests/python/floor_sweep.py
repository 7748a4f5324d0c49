"""Trains one model, as its users write it, unmanaged and then under
tp.budget(RATIO) at each ratio given, in one process, for
test_floor_prediction.py: ``python floor_sweep.py MODEL RATIO...``.

Prints one JSON line per ratio: ``trained`` (every iteration, with the
losses bit for bit those of the unmanaged run or not), ``refused`` (at the
boundary that resolves the ratio, with the ratio the message names, and then
the outcome at that ratio), or ``died`` (out of memory after the budget was
accepted: the floor check's prediction failed, Note [Budget floor] in
hooks/budget/budget_floor.cpp).

Models: ``resnet_momentum``, a torchvision ResNet-18 with SGD momentum and
weight decay, ``zero_grad()`` just before ``backward()`` (the reference
ImageNet order: gradients and momentum live through every forward from the
second); ``decoder``, a GPT-style decoder with a tied head and AdamW; ``mlp``,
an MLP with Adam and gradient accumulation over 2 micro-batches.
"""

from __future__ import annotations

import gc
import json
import re
import sys

import torch
from torch import nn

import tensorpager as tp

ITERATIONS = 4  # two measure the ratio (Note [Where an iteration ends]), two run under it
REFUSED = re.compile(r"\(ratio (?P<ratio>[\d.]+) of the peak\): the budget is refused")


class Decoder(nn.Module):
    def __init__(self, vocab: int = 256, d: int = 64, seq: int = 64, layers: int = 4) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, d)
        self.positions = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
            for _ in range(layers))
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tokens(idx) + self.positions(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x, src_mask=self.causal, is_causal=True)
        return x @ self.tokens.weight.t()


def train(model_name: str) -> list[str]:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    losses = []
    if model_name == "resnet_momentum":
        import torchvision

        model = torchvision.models.resnet18(num_classes=10)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
        for _ in range(ITERATIONS):
            x, y = torch.randn(16, 3, 128, 128, generator=g), torch.randint(0, 10, (16,), generator=g)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item().hex())
    elif model_name == "decoder":
        model = Decoder()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for _ in range(ITERATIONS):
            idx = torch.randint(0, 256, (32, 64), generator=g)
            loss = nn.functional.cross_entropy(model(idx).flatten(0, 1), idx.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item().hex())
    elif model_name == "mlp":
        model = nn.Sequential(*[nn.Sequential(nn.Linear(512, 512), nn.GELU()) for _ in range(8)], nn.Linear(512, 10))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for _ in range(ITERATIONS):
            for _ in range(2):
                x, y = torch.randn(1024, 512, generator=g), torch.randint(0, 10, (1024,), generator=g)
                (nn.functional.cross_entropy(model(x), y) / 2).backward()
            opt.step()
            opt.zero_grad()
            losses.append(x.new_tensor(0).add(next(model.parameters()).sum()).item().hex())
    else:
        raise SystemExit(f"floor_sweep.py: unknown model {model_name!r}; accepted: resnet_momentum, decoder, mlp")
    return losses


def under(model_name: str, ratio: float, reference: list[str]) -> dict:
    gc.collect()
    tp.empty_cache()
    try:
        with tp.budget(ratio):
            losses = train(model_name)
        return {"outcome": "trained", "identical": losses == reference}
    except torch.OutOfMemoryError as e:
        refused = REFUSED.search(str(e))
        if refused:
            return {"outcome": "refused", "works": float(refused["ratio"])}
        return {"outcome": "died", "message": str(e)[:600]}


def main() -> None:
    model_name, ratios = sys.argv[1], [float(r) for r in sys.argv[2:]]
    tp.install(device="cpu")
    reference = train(model_name)
    for ratio in ratios:
        out = {"model": model_name, "ratio": ratio, **under(model_name, ratio, reference)}
        if out["outcome"] == "refused":
            out["at_works"] = under(model_name, out["works"], reference)
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
