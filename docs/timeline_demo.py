"""The README's timeline picture: train a small CNN on the CPU adapter with a
timeline recording, write every format, and render the HTML page to a PNG.

    PYTHONPATH=python TENSORPAGER_EXT_DIR=build/hooks python3 docs/timeline_demo.py [--out DIR] [--png docs/timeline.png]

The model and loop are examples/train_small_cnn.py's. The PNG needs Chromium
(Debian: apt-get install chromium); without it the files are still written.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/tensorpager-timeline-demo", help="where the timeline files go")
    parser.add_argument("--png", default=str(REPO / "docs" / "timeline.png"))
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()

    import torch
    from torch import nn

    import tensorpager as tp
    from train_small_cnn import make_model

    tp.install(device="cpu", budget="128MiB")
    torch.manual_seed(0)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(32, 3, 64, 64)
    y = torch.randint(0, 10, (32,))

    def train_step() -> float:
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    # One step before recording: the first convolution's set-up time stays out
    # of the picture, and the parameters and momentum buffers, allocated
    # before recording began, show how tags label such blocks.
    train_step()
    tp.start_timeline()
    for step in range(args.steps):
        print(f"step {step}: loss {train_step():.4f}")
    tp.stop_timeline()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for ext in ("json", "pickle", "html", "txt"):
        tp.dump_timeline(out / f"run.{ext}", top=12)
    print(tp.report(top=12))
    print(f"wrote {out}/run.{{json,pickle,html,txt}}")

    chromium = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    if chromium is None:
        print("Chromium not found: no PNG", file=sys.stderr)
        return 0
    cmd = [chromium, "--headless", "--disable-gpu", "--hide-scrollbars", f"--screenshot={args.png}",
           "--window-size=1280,1400", (out / "run.html").as_uri()]
    if os.geteuid() == 0:
        cmd.insert(1, "--no-sandbox")
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
