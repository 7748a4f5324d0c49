"""tensorpager on a CUDA device. Skipped where torch.cuda.is_available() is False.

Each case runs in a child started with PYTORCH_CUDA_ALLOC_CONF, as a user
would, so the allocator is installed before any CUDA memory is taken.
"""

from __future__ import annotations

import json

import pytest
from conftest import clean_env, requires_ext, run_python

pytestmark = [pytest.mark.gpu, requires_ext]

MiB = 1 << 20


def _run(code: str, conf: str = "backend:tensorpager,budget:8GiB", **env: str) -> str:
    env = clean_env(PYTORCH_CUDA_ALLOC_CONF=conf, **env)
    return run_python(code, env=env, hook=True).stdout


def test_installed_on_cuda_by_the_start_up_hook() -> None:
    out = _run(
        """
        import torch, tensorpager as tp
        print(tp.is_installed(), tp.device_kind(), tp.config()["device_source"], tp.get_budget())
        """
    )
    assert out.split() == ["True", "cuda", "default", str(8 << 30)]


def test_memory_stats_agree_with_torch_cuda() -> None:
    out = _run(
        """
        import json, torch, tensorpager as tp
        key = "allocated_bytes.all.current"
        torch.cuda.synchronize()
        base = torch.cuda.memory_stats()[key]
        rows = []
        for n in (1, 1000, 512 * 1024, 3 << 20, 100 << 20):
            x = torch.empty(n, dtype=torch.uint8, device="cuda")
            s = torch.cuda.memory_stats()
            rows.append([n, s[key] - base, tp.stats()[key] - base,
                         torch.cuda.memory_allocated() - base, tp.stats()["tensorpager.budget"]])
            del x
            rows.append([n, torch.cuda.memory_stats()[key] - base, tp.stats()[key] - base,
                         torch.cuda.memory_allocated() - base, 0])
        print(json.dumps(rows))
        """
    )
    rows = json.loads(out.strip().splitlines()[-1])
    for (n, torch_grown, tp_grown, allocated, budget), (_, torch_back, tp_back, alloc_back, _) in zip(
        rows[::2], rows[1::2]
    ):
        assert torch_grown == tp_grown == allocated == -(-n // 512) * 512, (n, torch_grown, tp_grown)
        assert budget == 8 << 30
        assert torch_back == tp_back == alloc_back == 0


def test_empty_cache_returns_memory_to_the_device() -> None:
    out = _run(
        """
        import torch
        x = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
        del x
        torch.cuda.synchronize()
        before = torch.cuda.mem_get_info()[0]
        reserved = torch.cuda.memory_reserved()
        torch.cuda.empty_cache()
        after = torch.cuda.mem_get_info()[0]
        print(before, after, reserved, torch.cuda.memory_reserved())
        """
    )
    before, after, reserved, reserved_after = map(int, out.split())
    assert reserved >= 512 * MiB
    assert reserved_after == 0
    assert after - before >= 500 * MiB


def test_record_stream_delays_reuse_on_another_stream() -> None:
    out = _run(
        """
        import torch
        n = 64 << 20
        x = torch.empty(n, dtype=torch.uint8, device="cuda")
        ptr = x.data_ptr()
        # The first launch of a kernel loads its module, which waits for the
        # whole device (CUDA's lazy loading): launch add_ once before the sleep,
        # or it would wait for the sleep and leave the side stream idle.
        x.add_(1)
        torch.cuda.synchronize()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(2_000_000_000)  # keep the side stream busy (about a second)
            x.add_(1)
        x.record_stream(side)
        busy = not side.query()
        del x
        y = torch.empty(n, dtype=torch.uint8, device="cuda")
        busy_reuse = y.data_ptr() == ptr
        side.synchronize()
        del y
        z = torch.empty(n, dtype=torch.uint8, device="cuda")
        print(busy, busy_reuse, torch.cuda.memory_allocated() == z.numel())
        """
    )
    assert out.split() == ["True", "False", "True"]  # busy at the free; not reused; freed after


_RESNET = """
import json, os, torch, torchvision
torch.manual_seed(0)
torch.backends.cudnn.benchmark = False
torch.backends.cudnn.deterministic = True
torch.use_deterministic_algorithms(True, warn_only=True)  # adaptive_avg_pool2d has no deterministic backward
model = torchvision.models.resnet50(num_classes=100).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
data = torch.randn(16, 3, 224, 224, device="cuda")
target = torch.randint(0, 100, (16,), device="cuda")
losses = []
for _ in range(2):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(data), target)
    loss.backward()
    opt.step()
    losses.append(loss.item().hex())
import tensorpager as tp
print(json.dumps({"losses": losses, "installed": tp.is_installed(),
                  "checksum": sum(float(p.double().sum()) for p in model.parameters()).hex()}))
"""


def test_resnet50_step_matches_without_tensorpager() -> None:
    pytest.importorskip("torchvision")
    env = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    plain = json.loads(
        run_python(_RESNET, env=clean_env(**env), hook=True).stdout.strip().splitlines()[-1]
    )
    managed = json.loads(_run(_RESNET, "backend:tensorpager,budget:40GiB", **env).strip().splitlines()[-1])
    assert plain["installed"] is False and managed["installed"] is True
    assert managed["losses"] == plain["losses"]
    assert managed["checksum"] == plain["checksum"]


def test_tiny_budget_raises_torch_out_of_memory() -> None:
    out = _run(
        """
        import torch
        try:
            torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        except torch.OutOfMemoryError as e:
            print(str(e).replace("\\n", " "))
        else:
            raise SystemExit("no OutOfMemoryError")
        print(torch.cuda.memory_stats()["num_ooms"])
        """,
        "backend:tensorpager,budget:64MiB",
    )
    message, ooms = out.strip().splitlines()
    assert "tried to allocate" in message and "Budget" in message
    assert int(ooms) >= 1


def test_a_child_forked_after_import_allocates_through_tensorpager() -> None:
    # test_cuda_startup.py checks, on any machine, that import makes no CUDA
    # call; here the forked child really uses the GPU.
    out = _run(
        """
        import os, torch, tensorpager as tp
        from tensorpager import _ext
        assert _ext.load().cuda_driver_calls() == 0 and not torch.cuda.is_initialized()
        pid = os.fork()
        if pid == 0:
            x = torch.arange(1 << 20, device="cuda", dtype=torch.float64)
            ok = x.sum().item() == (1 << 20) * ((1 << 20) - 1) / 2
            ok = ok and tp.stats()["allocated_bytes.all.current"] >= x.numel() * 8
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
        """
    )
    assert out.split()[-1] == "0"


def test_cuda_visible_devices_set_after_import_still_applies() -> None:
    out = _run(
        """
        import os, torch, tensorpager as tp
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # after tensorpager installed itself at import
        print(tp.is_installed(), torch.cuda.is_available())
        """
    )
    assert out.split() == ["True", "False"]


def test_record_stream_with_a_stream_of_another_device() -> None:
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    out = _run(
        """
        import torch
        n = 64 << 20
        x = torch.empty(n, dtype=torch.uint8, device="cuda:0")
        ptr = x.data_ptr()
        other = torch.cuda.Stream(device="cuda:1")
        with torch.cuda.device(1), torch.cuda.stream(other):
            torch.cuda._sleep(2_000_000_000)  # keeps cuda:1's stream busy for about a second
        x.record_stream(other)  # PyTorch's allocator accepts it; so must tensorpager
        del x
        y = torch.empty(n, dtype=torch.uint8, device="cuda:0")
        busy_reuse = y.data_ptr() == ptr
        other.synchronize()
        del y
        z = torch.empty(n, dtype=torch.uint8, device="cuda:0")
        print(busy_reuse, torch.cuda.memory_allocated(0) == z.numel())
        """
    )
    assert out.split() == ["False", "True"]


def test_a_refused_graph_capture_leaves_the_thread_on_its_stream() -> None:
    # Note [A refused capture leaves the stream as it was] in _graphs.py.
    out = _run(
        """
        import torch
        before = torch.cuda.current_stream()
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g):
                pass
        except NotImplementedError as e:
            print("refused", "tensorpager does not support" in str(e))
        print(torch.cuda.current_stream() == before)
        """
    )
    assert out.split() == ["refused", "True", "True"]
