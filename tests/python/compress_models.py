"""Models, inputs and the package fixture the tp.compress tests share (test_compress.py, test_compress_selection.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

F = torch.nn.functional


def smooth_images(n: int, seed: int, size: int = 32) -> torch.Tensor:
    low = torch.randn(n, 3, size // 4, size // 4, generator=torch.Generator().manual_seed(seed))
    return F.interpolate(low, size=(size, size), mode="bilinear", align_corners=False)


def small_cnn(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    )


@pytest.fixture(scope="module")
def tp():  # noqa: ANN201 - the package, with the extension loaded
    import tensorpager

    tensorpager.compress.reset_stats()
    return tensorpager
