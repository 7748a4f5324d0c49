"""A training script that knows nothing of tensorpager (tests/python/test_zero_code.py).

A small GPT-style decoder (token and position embeddings, causal
TransformerEncoderLayers, a tied head) trained with AdamW for a few steps on
seeded random tokens. It prints one ``loss <step> <float.hex>`` line per step,
so two runs can be compared bit for bit, and, on CUDA, torch's own peak.

Run it as a user would: ``PYTORCH_CUDA_ALLOC_CONF=... python zero_code_train.py``.
``ZERO_CODE_THREAD=1`` trains on a thread other than the one that imported torch;
``ZERO_CODE_DDP=1`` wraps the model in DistributedDataParallel (one rank);
``ZERO_CODE_MODEL=resnet`` trains a torchvision ResNet-18 with plain SGD instead.
"""

import os

import torch
from torch import nn

STEPS = int(os.environ.get("ZERO_CODE_STEPS", "5"))
VOCAB, D_MODEL, HEADS, LAYERS, SEQ, BATCH = 256, 64, 4, 4, 64, 32
RESNET_BATCH, RESNET_SIZE = 16, 128


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, D_MODEL)
        self.positions = nn.Embedding(SEQ, D_MODEL)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(D_MODEL, HEADS, dim_feedforward=4 * D_MODEL, dropout=0.1,
                                       batch_first=True, norm_first=True)
            for _ in range(LAYERS))
        self.norm = nn.LayerNorm(D_MODEL)
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(SEQ), persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tokens(idx) + self.positions(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x, src_mask=self.causal, is_causal=True)
        return self.norm(x) @ self.tokens.weight.t()


def data_parallel(model: nn.Module, device: str) -> nn.Module:
    """model wrapped in DistributedDataParallel, in a process group of one rank."""
    import tempfile

    import torch.distributed as dist

    store = os.path.join(tempfile.mkdtemp(), "store")
    dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=f"file://{store}", rank=0,
                            world_size=1)
    return nn.parallel.DistributedDataParallel(model)


def train_resnet(device: str) -> None:
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1)
    for step in range(STEPS):
        x = torch.randn(RESNET_BATCH, 3, RESNET_SIZE, RESNET_SIZE, generator=g).to(device)
        y = torch.randint(0, 10, (RESNET_BATCH,), generator=g).to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"loss {step} {loss.item().hex()}", flush=True)


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if os.environ.get("ZERO_CODE_MODEL") == "resnet":
        train_resnet(device)
        return
    torch.manual_seed(0)
    model = Decoder().to(device)
    if os.environ.get("ZERO_CODE_DDP") == "1":  # one rank of DistributedDataParallel
        model = data_parallel(model, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randint(0, VOCAB, (STEPS, BATCH, SEQ + 1), generator=torch.Generator().manual_seed(1))
    for step in range(STEPS):
        batch = data[step].to(device)
        logits = model(batch[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"loss {step} {loss.item().hex()}", flush=True)
    if device == "cuda":
        print(f"torch max_memory_reserved {torch.cuda.max_memory_reserved()}", flush=True)


if __name__ == "__main__":
    if os.environ.get("ZERO_CODE_THREAD") == "1":  # train on a thread of its own, as a server or a GUI would
        import threading

        worker = threading.Thread(target=main)
        worker.start()
        worker.join()
    else:
        main()
