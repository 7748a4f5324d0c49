"""Hostile configuration: every front door refuses bad input with a named error, never a crash.

Each row is (input, the fragment its error message must hold). Here the doors
that need neither the extension nor an installed allocator, in process:
PyTorch's entries beside backend:tensorpager, budget values at the Python
front doors, viz inputs. The doors that install (configuration text,
set_budget, tp.budget, tp-sim, the start-up hook) run in child interpreters:
test_hostile_config_installed.py.
"""

from __future__ import annotations

import json

import pytest
from hostile_values import BIG, MB1, GiB

from tensorpager import _budget_value, _torch_alloc_conf, viz


# --- PyTorch's entries beside backend:tensorpager (Note [Checking PyTorch's entries]) ---

HOOK_ROWS = [
    ("backend:tensorpager,budgte:1GiB", "unknown key 'budgte' (did you mean 'budget'?)"),
    ("backend:tensorpager,polcy:lru", "unknown key 'polcy' (did you mean 'policy'?)"),
    ("backend:tensorpager,roundup_power2_divisions:[256:1," + "x" * 100_000, "is never closed by ']'"),
    ("backend:tensorpager,max_split_size_mb:", "the value of 'max_split_size_mb' is empty"),
    ("backend:tensorpager,expandable_segments:maybe", "'maybe' is not True or False"),
    ("backend:tensorpager,expandable_segments:true", "'true' is not True or False"),
    ("backend:tensorpager,max_split_size_mb:12:3", "holds ':', '[' or ']'"),
    ("backend:tensorpager,max_split_size_mb:-5", "'-5' is not a whole number"),
    ("backend:tensorpager,]", "closes no '['"),
    ("backend:tensorpager,roundup_power2_divisions:[[1:2]]", "opens a list inside another list"),
    ("backend:tensorpager,roundup_power2_divisions:[256:1,x]", "is not SIZE:DIVISIONS"),
    ("backend:tensorpager,garbage_collection_threshold:nan", "'nan' is not a number"),
    ("backend:tensorpager,budget\uff1a1GiB", "unknown key 'budget\uff1a1GiB'"),  # a full-width colon
    ("backend:tensorpager,max split_size_mb:128", "unknown key 'max split_size_mb'"),
    ("backend:tensorpager," + "k" * MB1 + ":1", "(1048576 characters)"),
    ("backend:tensorpager,max_split_size_mb", "missing ':' between key and value"),
    # tensorpager meant, but no entry says backend:tensorpager: nothing would be installed (issue 30).
    ("BACKEND:tensorpager,MANAGE:all,BUDGET:0.5", "no entry is backend:tensorpager"),
    ("backend:tensorpager;manage:all;budget:0.5", "separated by ','"),
    ("backend=tensorpager,manage:all", "Entries are key:value"),  # c10's tokenizer aborts on it
]


@pytest.mark.parametrize(("text", "fragment"), HOOK_ROWS, ids=range(len(HOOK_ROWS)))
def test_pytorch_entries_beside_tensorpager_are_checked(text: str, fragment: str) -> None:
    env = {"PYTORCH_CUDA_ALLOC_CONF": text}
    refused = _torch_alloc_conf.take_unreadable(env)
    assert refused is not None, text[:100]
    var, message = refused
    assert var == "PYTORCH_CUDA_ALLOC_CONF" and "PYTORCH_CUDA_ALLOC_CONF" not in env  # torch never reads it
    assert fragment in message, message[:300]
    assert len(message) < 3000  # a 1 MB input is quoted in part


@pytest.mark.parametrize(
    "text",
    [
        "backend:tensorpager,expandable_segments:True,roundup_power2_divisions:[256:1,>:2],max_split_size_mb:128",
        "backend:tensorpager, garbage_collection_threshold:0.6 ,pinned_use_cuda_host_register:False",
        "budgte:1GiB",  # no backend:tensorpager: PyTorch's business alone
        "backend:native,roundup_power2_divisions:[256:1",
    ],
)
def test_readable_or_foreign_values_are_left_alone(text: str) -> None:
    env = {"PYTORCH_CUDA_ALLOC_CONF": text}
    assert _torch_alloc_conf.take_unreadable(env) is None
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == text


# --- budget values at the Python front doors (no extension needed) -------------

VALUE_ROWS = [
    (None, "tensorpager.set_budget", "ok"),
    (2**70, "tensorpager.set_budget", "the size is too large"),
    (2**70, "tensorpager.budget", "the size is too large"),
    (-1, "tensorpager.budget", "> 0 bytes"),
    (0, "tensorpager.set_budget", "> 0 bytes"),
    (float("nan"), "tensorpager.set_budget", "finite"),
    (float("inf"), "tensorpager.budget", "finite"),
    (-0.5, "tensorpager.budget", "(0, 1]"),
    ("", "tensorpager.set_budget", "the budget is empty"),
    ("   ", "tensorpager.budget", "the budget is empty"),
    (BIG, "tensorpager.set_budget", "the size is too large"),
    ("1e-300", "tensorpager.set_budget", "unknown unit 'e-300'"),
    ("12 gigs", "tensorpager.budget", "unknown unit 'gigs'"),
    ("\uff11GiB", "tensorpager.set_budget", "does not start with a number"),  # a full-width 1
    (True, "tensorpager.budget", "TypeError"),
    ([1], "tensorpager.set_budget", "TypeError"),
    ("0.5 devices", "tensorpager.budget", "unknown unit 'devices'"),
    ("1device", "tensorpager.set_budget", "write a number with a decimal point"),
    ("1.5peak", "tensorpager.budget", "ratio of the peak outside (0, 1]"),
]


@pytest.mark.parametrize(("value", "door", "fragment"), VALUE_ROWS, ids=range(len(VALUE_ROWS)))
def test_budget_values_are_refused_alike(value: object, door: str, fragment: str) -> None:
    if fragment == "ok":
        assert _budget_value.check(value, door) is None
        return
    error = TypeError if fragment == "TypeError" else ValueError
    with pytest.raises(error) as info:
        _budget_value.check(value, door)
    assert str(info.value).startswith(f"{door}("), str(info.value)[:200]
    if error is ValueError:
        assert fragment in str(info.value)


def test_a_ratio_that_rounds_to_zero_bytes_names_the_smallest_usable_one() -> None:
    with pytest.raises(ValueError, match=r"rounds to 0 bytes; the smallest usable ratio is 1\.46e-11"):
        _budget_value.ratio_bytes(1e-300, 64 * GiB, "tensorpager.set_budget", "the device's memory")


# --- viz inputs ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "fragment"),
    [(b"<html><body>a page</body></html>", "cannot be read as JSON"), (b"\x80\x05garbage", "cannot be read as pickle"),
     (json.dumps({"a": 1}).encode(), "not a tensorpager timeline nor a PyTorch memory snapshot")],
)
def test_viz_says_which_inputs_it_reads(tmp_path, capsys, content: bytes, fragment: str) -> None:  # noqa: ANN001
    src = tmp_path / "run.html"
    src.write_bytes(content)
    assert viz.main([str(src), "-o", str(tmp_path / "run.json")]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "reads a .json or .pickle timeline" in err and "Traceback" not in err

