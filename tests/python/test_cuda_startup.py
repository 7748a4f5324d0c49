"""No CUDA call at ``import torch`` (Note [No CUDA call before the first
allocation] in hooks/cuda_adapter.cpp), on any machine.

tensorpager installs itself while torch is imported. Were that to call CUDA,
the driver would be initialised during the import: a ``CUDA_VISIBLE_DEVICES``
set afterwards would be ignored, and a process forked afterwards could not use
CUDA. Each case runs in a child started as a user would; the CUDA adapter is
forced with ``device:cuda`` so that it is the one installed even without a
GPU. Calls are counted where tensorpager makes them (its driver loader,
``_C.cuda_driver_calls()``), and what PyTorch or anyone did is seen from
outside: torch's own flag, and whether the driver library is mapped beyond
what ``import torch`` alone maps (torch 2.11's CUDA wheels map it at import:
cuBLASLt opens it as torch's libraries load, seen on an H200 on 2026-11-27;
mapping it initialises nothing).
The GPU halves (a tensor allocated in the forked child, CUDA_VISIBLE_DEVICES
after import) are in test_gpu.py.
"""

from __future__ import annotations

import functools
import json

import pytest
from conftest import clean_env, extension_path, requires_ext, run_python

pytestmark = [requires_ext]

_PROBE = """
import json, sys, torch, tensorpager as tp
from tensorpager import _ext
ext = _ext.load()
def state():
    return {"installed": tp.is_installed(), "kind": tp.device_kind() if tp.is_installed() else None,
            "driver_calls": ext.cuda_driver_calls(), "torch_initialized": torch.cuda.is_initialized(),
            "libcuda_mapped": "libcuda.so" in open("/proc/self/maps").read()}
"""


def _cuda_build() -> bool:
    proc = run_python(
        """
        from tensorpager import _ext
        try:
            _ext.load().cuda_device_name(0)
        except RuntimeError as e:
            print("no-cuda-build" if "TP_WITH_CUDA=OFF" in str(e) else "cuda-build")
        else:
            print("cuda-build")
        """,
        check=False,
    )
    return proc.stdout.strip() == "cuda-build"


@functools.cache
def _torch_maps_libcuda() -> bool:
    """Whether ``import torch`` without tensorpager maps the driver library."""
    proc = run_python("import torch; print('libcuda.so' in open('/proc/self/maps').read())")
    return proc.stdout.split()[-1] == "True"


requires_cuda_build = pytest.mark.skipif(
    extension_path() is None or not _cuda_build(), reason="tensorpager._C was built without TP_WITH_CUDA"
)


@requires_cuda_build
def test_import_torch_with_the_cuda_adapter_makes_no_cuda_call() -> None:
    proc = run_python(
        _PROBE
        + """
print(json.dumps(state()))
# What a program may ask before its first CUDA tensor calls no CUDA either.
tp.stats(); tp.memory_summary(); tp.config(); tp.get_budget(); tp.snapshot(); tp.empty_cache()
torch.cuda.memory_stats(); torch.cuda.memory_allocated(); torch.cuda.memory_reserved()
print(json.dumps(state()))
""",
        hook=True,
        env=clean_env(PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager,device:cuda,budget:1GiB"),
    )
    after_import, after_queries = (json.loads(line) for line in proc.stdout.splitlines()[-2:])
    expected = {"installed": True, "kind": "cuda", "driver_calls": 0, "torch_initialized": False,
                "libcuda_mapped": _torch_maps_libcuda()}
    assert after_import == expected
    assert after_queries == expected


@requires_cuda_build
@pytest.mark.parametrize("conf", ["manage:activations", "manage:activations,budget:0.5", "manage:all,budget:2GiB",
                                  "manage:all,budget:0.9device"])
def test_a_managed_process_opens_no_device_at_import(conf: str) -> None:
    # Note [A session opens its device at the first tensor] in
    # hooks/budget/budget_session.hpp: the process budget that manage:* enters
    # at import takes its device at the first saved tensor (before, the import
    # initialised CUDA, and raised on a machine without a driver).
    proc = run_python(
        _PROBE + "print(json.dumps(state()), tp.stats()['tensorpager.runtime.active'])",
        hook=True,
        env=clean_env(PYTORCH_CUDA_ALLOC_CONF=f"backend:tensorpager,device:cuda,{conf}"),
    )
    line = proc.stdout.splitlines()[-1]
    s, active = json.loads(line.rsplit(" ", 1)[0]), int(line.rsplit(" ", 1)[1])
    assert s == {"installed": True, "kind": "cuda", "driver_calls": 0, "torch_initialized": False,
                 "libcuda_mapped": _torch_maps_libcuda()}
    assert active == 1, "the process budget is not active"


@requires_cuda_build
def test_device_cuda_without_a_visible_gpu_says_so_once() -> None:
    # Issue 30: accepted (no driver call may decide otherwise at import), but
    # it manages nothing, and before it said nothing.
    import torch

    proc = run_python(_PROBE + "print(json.dumps(state()))", hook=True,
                      env=clean_env(PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager,device:cuda,manage:all"))
    said = proc.stderr.count("device:cuda, but torch sees no CUDA device")
    assert said == (1 if torch.cuda.device_count() == 0 else 0), proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["driver_calls"] == 0


def test_choosing_the_device_at_import_makes_no_cuda_call() -> None:
    # No device key: install() counts devices (NVML, not the driver) to choose.
    proc = run_python(
        _PROBE + "print(json.dumps(state()))",
        hook=True,
        env=clean_env(PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager"),
    )
    s = json.loads(proc.stdout.splitlines()[-1])
    assert s["installed"] and not s["torch_initialized"], s
    assert s["libcuda_mapped"] == _torch_maps_libcuda(), s
    assert s["driver_calls"] == 0


@requires_cuda_build
def test_a_child_forked_after_import_can_use_the_device_layer() -> None:
    proc = run_python(
        _PROBE
        + """
import os
count = torch.cuda.device_count()  # NVML: initialises nothing
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    try:
        msg = "opened: " + ext.cuda_device_name(0)
    except RuntimeError as e:
        msg = "error: " + str(e)
    os.write(w, msg.encode())
    os._exit(0)
os.close(w)
msg = os.read(r, 65536).decode()
os.waitpid(pid, 0)
print(json.dumps({"count": count, "child": msg, "parent": state()}))
""",
        hook=True,
        env=clean_env(PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager,device:cuda"),
    )
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["parent"]["driver_calls"] == 0, out
    if out["count"] > 0:
        # The driver initialises in the child: nothing initialised it before the fork.
        assert out["child"].startswith("opened: "), out
    else:
        # No GPU: the device layer says so cleanly, from the child.
        assert out["child"].startswith("error: no CUDA device"), out
