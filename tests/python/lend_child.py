"""The child process the lending tests run (test_lend.py, test_lend_within_backward.py): MODEL,
its model and training loop on the CPU adapter, and RECORDING, a proxy that records the loans.

The model has a stem of large activations (a convolution, BatchNorm and ReLU
at 64x64) under a head of large weights, so its backward peaks in the stem
while the head's weights and gradients wait for the optimizer: the shape of a
ResNet's.
"""

from __future__ import annotations

import json

from conftest import run_python

MODEL = """
import contextlib, json, torch
from torch import nn
import tensorpager as tp
tp.install(device="cpu")

def model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.AdaptiveAvgPool2d(8), nn.Flatten(),
        nn.Linear(2048, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))

torch.manual_seed(1)
X, Y = torch.randn(8, 3, 64, 64), torch.randint(0, 10, (8,))

def train(ratio=None, lend=True, steps=3, retain=False):
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    losses = []
    with tp.budget(ratio, policy="lru", lend=lend) if ratio is not None else contextlib.nullcontext():
        for i in range(steps):
            if i == 1 and ratio is not None:
                tp.step()
                tp.reset_peak_stats()
            opt.zero_grad()
            loss = nn.functional.cross_entropy(m(X), Y)
            loss.backward(retain_graph=retain)
            if retain:
                loss.backward()  # a second backward through the retained graph
            opt.step()
            losses.append(loss.item().hex())
        stats = tp.stats()
        stats["budget"] = tp.get_budget()
    state = {k: v.detach().clone() for k, v in m.state_dict().items()}
    return losses, state, stats
"""

# The lender's ext, passed through: its real loans, each recorded as
# record("lend", label) when made and record("back", label) when given back,
# for the tensors that label(t) names (None: not recorded).
RECORDING = """
class RecordingLoan:
    def __init__(self, loan, label, record):
        self.loan, self.label, self.record = loan, label, record
    def give_back(self):
        self.record("back", self.label)
        self.loan.give_back()

class RecordingExt:
    def __init__(self, ext, label, record):
        self.ext, self.label, self.record = ext, label, record
    def lend(self, t):
        loan = self.ext.lend(t)
        label = None if loan is None else self.label(t)
        if label is None:
            return loan
        self.record("lend", label)
        return RecordingLoan(loan, label, self.record)
"""


def run_child(body: str) -> dict:
    """Runs MODEL, then body, in a child process; the last line body prints, as JSON."""
    proc = run_python(MODEL + body, timeout=600)
    return json.loads(proc.stdout.strip().splitlines()[-1])
