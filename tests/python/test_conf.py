"""The start-up hook's string surgery (Note [Sharing PYTORCH_CUDA_ALLOC_CONF]); no torch, no _C."""

from __future__ import annotations

import os

import pytest

from tensorpager import _conf

CUDA = "PYTORCH_CUDA_ALLOC_CONF"
ALLOC = "PYTORCH_ALLOC_CONF"
TP = "TENSORPAGER_CONF"


def test_split_entries_keeps_bracketed_lists_whole() -> None:
    text = "expandable_segments:False, roundup_power2_divisions:[256:1,512:2,>:1] ,,budget:1GiB"
    assert _conf.split_entries(text) == [
        "expandable_segments:False",
        "roundup_power2_divisions:[256:1,512:2,>:1]",
        "budget:1GiB",
    ]
    assert _conf.split_entries("a:[1,2]", bracket_aware=False) == ["a:[1", "2]"]


def test_split_alloc_conf_mirrors_cpp() -> None:
    ours, theirs = _conf.split_alloc_conf(
        "backend:tensorpager,budget:1GiB,expandable_segments:False,policy:lru"
    )
    # expandable_segments is PyTorch's key and tensorpager's: both keep it.
    assert ours == ["backend:tensorpager", "budget:1GiB", "expandable_segments:False", "policy:lru"]
    assert theirs == ["expandable_segments:False"]
    # Another backend is PyTorch's too.
    ours, theirs = _conf.split_alloc_conf("backend:cudaMallocAsync,budget:1GiB")
    assert ours == ["backend:cudaMallocAsync", "budget:1GiB"]
    assert theirs == ["backend:cudaMallocAsync"]


def test_moves_our_keys_and_keeps_pytorchs_in_order() -> None:
    env = {CUDA: "backend:tensorpager,budget:1GiB,expandable_segments:False"}
    assert _conf.move_alloc_conf_keys(env) == []
    assert env == {CUDA: "expandable_segments:False", TP: "backend:tensorpager,budget:1GiB,expandable_segments:False"}


def test_expandable_segments_without_our_backend_stays_pytorchs_without_a_notice() -> None:
    env = {CUDA: "expandable_segments:True,max_split_size_mb:128"}
    assert _conf.move_alloc_conf_keys(env) == []
    assert env == {CUDA: "expandable_segments:True,max_split_size_mb:128"}


def test_install_takes_a_bool_for_expandable_segments() -> None:
    assert _conf.option_to_text("expandable_segments", False) == "expandable_segments:False"
    assert _conf.merge_options("budget:1GiB", {"expandable_segments": True}) == "budget:1GiB,expandable_segments:True"


def test_keeps_bracketed_pytorch_values_intact() -> None:
    env = {
        CUDA: "max_split_size_mb:128,backend:tensorpager,roundup_power2_divisions:[256:1,512:2],"
        "policy:dtr,garbage_collection_threshold:0.6"
    }
    _conf.move_alloc_conf_keys(env)
    assert env[CUDA] == (
        "max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2],"
        "garbage_collection_threshold:0.6"
    )
    assert env[TP] == "backend:tensorpager,policy:dtr,max_split_size:128MiB"  # Note [PyTorch's keys under tensorpager]


def test_deletes_the_variable_when_nothing_is_left() -> None:
    env = {CUDA: " backend : tensorpager , budget:0.6 "}
    _conf.move_alloc_conf_keys(env)
    assert CUDA not in env
    assert env[TP] == "backend : tensorpager,budget:0.6"


def test_backend_value_is_case_insensitive() -> None:
    env = {CUDA: "backend:TensorPager"}
    _conf.move_alloc_conf_keys(env)
    assert env == {TP: "backend:TensorPager"}


def test_leaves_variable_alone_without_backend_tensorpager() -> None:
    env = {CUDA: "expandable_segments:True"}
    assert _conf.move_alloc_conf_keys(env) == []
    assert env == {CUDA: "expandable_segments:True"}


def test_warns_about_our_keys_without_backend_tensorpager() -> None:
    env = {CUDA: "budget:1GiB,expandable_segments:True"}
    notices = _conf.move_alloc_conf_keys(env)
    assert env == {CUDA: "budget:1GiB,expandable_segments:True"}
    assert len(notices) == 1
    assert "budget:1GiB" in notices[0] and "backend:tensorpager" in notices[0]


def test_explicit_tensorpager_conf_wins_and_says_so() -> None:
    env = {CUDA: "backend:tensorpager,budget:1GiB,policy:lru", TP: "budget:2GiB"}
    notices = _conf.move_alloc_conf_keys(env)
    assert env == {TP: "budget:2GiB,backend:tensorpager,policy:lru"}
    assert notices == [
        "PYTORCH_CUDA_ALLOC_CONF's 'budget:1GiB' is overridden by TENSORPAGER_CONF's 'budget:2GiB'."
    ]


def test_pytorch_alloc_conf_wins_over_the_cuda_variable() -> None:
    env = {ALLOC: "backend:tensorpager,budget:3GiB", CUDA: "backend:tensorpager,budget:1GiB,policy:lru"}
    notices = _conf.move_alloc_conf_keys(env)
    assert env == {TP: "backend:tensorpager,budget:3GiB,policy:lru"}
    assert len(notices) == 2  # backend and budget from the CUDA variable lose


def test_duplicate_key_inside_one_variable_reaches_the_parser() -> None:
    env = {CUDA: "backend:tensorpager,budget:1GiB,budget:2GiB"}
    _conf.move_alloc_conf_keys(env)
    assert env[TP] == "backend:tensorpager,budget:1GiB,budget:2GiB"


@pytest.mark.parametrize("value", ["1", "true", "yes", "ON"])
def test_disable_cleans_pytorchs_variable_and_requests_nothing(value: str) -> None:
    env = {CUDA: "backend:tensorpager,budget:1GiB,expandable_segments:False",
           "TENSORPAGER_DISABLE": value}
    notices = _conf.move_alloc_conf_keys(env)
    assert env == {CUDA: "expandable_segments:False", "TENSORPAGER_DISABLE": value}
    assert "TENSORPAGER_DISABLE" in notices[0]


@pytest.mark.parametrize("value", ["", "0", "false", "no", "off"])
def test_disable_off_values(value: str) -> None:
    assert not _conf.is_disabled({"TENSORPAGER_DISABLE": value})


def test_surgery_never_raises_on_odd_text() -> None:
    for text in ["", ",", ":", "[", "]]]", "backend", "backend:", ",,backend:tensorpager,,", "\x00:\x01"]:
        env = {CUDA: text}
        _conf.move_alloc_conf_keys(env)
        assert "backend:tensorpager" not in env.get(CUDA, "")


def test_option_to_text() -> None:
    assert _conf.option_to_text("budget", 1 << 30) == "budget:1073741824B"
    assert _conf.option_to_text("budget", "12GiB") == "budget:12GiB"
    assert _conf.option_to_text("budget", 0.6) == "budget:0.6"
    assert _conf.option_to_text("budget", None) == "budget:none"
    assert _conf.option_to_text("timeline", os.path.join("/tmp", "t.json")) == "timeline:/tmp/t.json"


def test_option_to_text_rejects_unknown_keys_listing_accepted_ones() -> None:
    with pytest.raises(ValueError) as info:
        _conf.option_to_text("budgit", "1GiB")
    message = str(info.value)
    assert "budgit='1GiB'" in message
    for key in ("backend", "budget", "host_budget", "sim_capacity"):
        assert key in message


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [("budget", True, TypeError), ("policy", 3, TypeError), ("host_budget", 0.5, ValueError),
     ("timeline", "a,b", ValueError), ("budget", [1], TypeError)],
)
def test_option_to_text_rejects_bad_values(key: str, value: object, error: type) -> None:
    with pytest.raises(error, match=key):
        _conf.option_to_text(key, value)


def test_merge_options_replaces_and_appends() -> None:
    assert _conf.merge_options("budget:1GiB,policy:lru", {"budget": "2GiB", "device": "cpu"}) == (
        "policy:lru,budget:2GiB,device:cpu"
    )
    assert _conf.merge_options("", {}) == ""


def test_parse_to_dict() -> None:
    assert _conf.parse_to_dict("budget:1GiB, timeline:C:/x.json") == {
        "budget": "1GiB",
        "timeline": "C:/x.json",
    }


def test_pytorchs_keys_with_a_tensorpager_meaning_are_honoured() -> None:
    # Note [PyTorch's keys under tensorpager]: they stay for PyTorch too.
    env = {CUDA: "backend:tensorpager,max_split_size_mb:256,per_process_memory_fraction:0.5"}
    assert _conf.move_alloc_conf_keys(env) == []
    assert env[CUDA] == "max_split_size_mb:256,per_process_memory_fraction:0.5"
    assert env[TP] == "backend:tensorpager,max_split_size:256MiB,budget:0.5device"
    env = {CUDA: "backend:tensorpager,per_process_memory_fraction:1"}
    _conf.move_alloc_conf_keys(env)
    assert env[TP] == "backend:tensorpager,budget:1.0device"  # "1" alone is ambiguous in tensorpager's grammar


def test_tensorpagers_own_key_wins_over_pytorchs_spelling() -> None:
    env = {CUDA: "backend:tensorpager,per_process_memory_fraction:0.5,budget:2GiB,max_split_size_mb:64",
           TP: "max_split_size:1GiB"}
    assert _conf.move_alloc_conf_keys(env) == []
    assert env[TP] == "max_split_size:1GiB,backend:tensorpager,budget:2GiB"


def test_pytorchs_keys_without_a_tensorpager_meaning_get_one_notice() -> None:
    env = {CUDA: "backend:tensorpager,garbage_collection_threshold:0.6,expandable_segments:True,"
                 "roundup_power2_divisions:[256:1,>:2]"}
    notices = _conf.move_alloc_conf_keys(env)
    assert len(notices) == 1, notices
    assert "'garbage_collection_threshold:0.6'" in notices[0] and "'roundup_power2_divisions:[256:1,>:2]'" in notices[0]
    assert "expandable_segments" not in notices[0]  # tensorpager's key as well
    assert "no effect" in notices[0]
