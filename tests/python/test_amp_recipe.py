"""Issue 33 item 3: a bf16-autocast transformer with GradScaler at half its peak, one variable.

A GPT-style decoder as its users write it, knowing nothing of tensorpager: a tied head, dropout,
causal attention, AdamW with weight decay, ``torch.autocast`` in bfloat16 around the forward and the
loss, ``GradScaler`` scaling the loss, unscaling before gradient clipping and stepping the
optimizer. Under only ``backend:tensorpager,manage:all,budget:0.5`` it must train to the plain
run's losses and final parameters and optimizer state bit for bit, with the budget in force and
something moved. (On the CPU, GradScaler with bfloat16 scales by 65536 and finds no overflow; it
still runs every call a mixed-precision loop makes.) Measured 2026-11-29: 0.5 is 68 MiB of a 136 MiB
peak, 184 offloads, identical.
"""

from __future__ import annotations

import re

from conftest import clean_env, requires_ext, run_python

pytestmark = requires_ext

SCRIPT = """
import hashlib
import torch, torch.nn as nn
torch.manual_seed(0)
d, T, B, V, L = 128, 128, 16, 512, 4


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, d)
        self.pos = nn.Parameter(torch.zeros(T, d))
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.1, batch_first=True, norm_first=True) for _ in range(L))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, V, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, x):
        h = self.tok(x) + self.pos
        mask = nn.Transformer.generate_square_subsequent_mask(T)
        for blk in self.blocks:
            h = blk(h, src_mask=mask, is_causal=True)
        return self.head(self.norm(h))


model = GPT()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
scaler = torch.amp.GradScaler("cpu")
for i in range(6):
    x = torch.randint(0, V, (B, T + 1))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(x[:, :-1])
        loss = nn.functional.cross_entropy(logits.float().view(-1, V), x[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    print("loss", i, loss.item().hex(), flush=True)
h = hashlib.sha256()
for p in model.parameters():
    h.update(p.detach().numpy().tobytes())
    for v in opt.state[p].values():
        h.update(v.detach().numpy().tobytes())
print("state", h.hexdigest())
"""


def test_a_bf16_autocast_gradscaler_decoder_trains_at_half_its_peak_bit_identically() -> None:
    plain = run_python(SCRIPT, env=clean_env(), hook=False)
    assert plain.stdout.count("loss ") == 6, plain.stdout
    conf = "backend:tensorpager,manage:all,budget:0.5"
    managed = run_python(SCRIPT, env=clean_env(PYTORCH_CUDA_ALLOC_CONF=conf), hook=True, check=False)
    assert managed.returncode == 0, managed.stderr[-3000:]
    assert managed.stdout == plain.stdout, "losses, parameters and optimizer state must equal the plain run's"
    exit_line = [line for line in managed.stderr.splitlines() if line.startswith("tensorpager: manage:all:")]
    assert len(exit_line) == 1, managed.stderr
    assert re.search(r"budget [\d.]+ MiB \(\d+ B\) = 0\.5 x ", exit_line[0]), exit_line[0]
    assert ", 6 steps;" in exit_line[0], exit_line[0]
    assert not re.search(r"\(0 offloads\), recomputed 0 B", exit_line[0]), "the budget moved nothing"
