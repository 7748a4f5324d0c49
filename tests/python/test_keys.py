"""tensorpager._keys agrees with the C++ key table (config/config.cpp) row by row."""

from __future__ import annotations

import re

import pytest
from conftest import REPO, requires_ext

from tensorpager import _keys

CONFIG_CPP = REPO / "config" / "config.cpp"

_STRING = r'"(?:[^"\\]|\\.)*"'


def _cpp_key_table() -> list[tuple[str, str, str, str, str]]:
    """The rows of key_table in config.cpp: (name, kind, accepted, default, description).

    Adjacent string literals are concatenated, as the compiler does.
    """
    source = CONFIG_CPP.read_text(encoding="utf-8")
    match = re.search(r"key_table\s*=\s*\{\{(.*?)\}\};", source, re.S)
    assert match, f"no key_table in {CONFIG_CPP}"
    rows = []
    for row in re.findall(r"\{((?:\s*(?:" + _STRING + r")\s*,?)+)\}", match.group(1)):
        fields = []
        for group in re.findall(r"((?:\s*" + _STRING + r")+)\s*(?:,|$)", row):
            fields.append("".join(s[1:-1] for s in re.findall(_STRING, group)))
        assert len(fields) == 5, f"unexpected key_table row in {CONFIG_CPP}: {row!r}"
        rows.append(tuple(fields))
    return rows


def test_cpp_table_parses() -> None:
    rows = _cpp_key_table()
    assert len(rows) >= 10
    assert rows[0][0] == "backend"


def test_python_keys_match_cpp_table() -> None:
    cpp = [(name, kind, default) for name, kind, _, default, _ in _cpp_key_table()]
    assert list(_keys.KEY_TABLE) == cpp, (
        "python/tensorpager/_keys.py is out of date with config/config.cpp's key_table;"
        " copy the (name, kind, default) of every row"
    )


@requires_ext
def test_python_keys_match_the_extension() -> None:
    from tensorpager import _ext

    ext = _ext.load()
    if not hasattr(ext, "config_keys"):
        pytest.skip("tensorpager._C has no config_keys(); the config.cpp comparison covers it")
    names = [k if isinstance(k, str) else (k["name"] if isinstance(k, dict) else k[0])
             for k in ext.config_keys()]
    assert tuple(names) == _keys.KEYS
