"""tp.compress's selection: the spec parsed into rules, and the method a rule gives a module.

The grammar (the module docs of compress.py, and Note [Compress key grammar]
in config/compress_spec.hpp for the process-wide key)::

    spec     := method | rule { ";" rule }
    rule     := selector "=" method
    selector := a module class name ("Conv2d", "ReLU") or a glob over
                qualified module names ("layer1.*", "fc"); "*" is every module

A dict ``{selector: method}`` is accepted too, where a selector may also be a
module class. When several rules match a module the last one wins; pool2
applies to ``nn.Conv2d`` modules only.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Union

from torch import nn

#: Every method name, "none" last.
METHODS: tuple[str, ...] = ("pool2", "bf16", "fp8", "none")

Selector = Union[str, type]
Spec = Union[str, Mapping[Selector, str], None]


def parse_spec(spec: Spec) -> list[tuple[Selector, str]]:
    """The (selector, method) rules of a spec, in order.

    Raises:
        ValueError: an unknown method, an empty selector or rule; the message
            names the input and lists what is accepted.
    """
    if spec is None:
        return []
    if isinstance(spec, Mapping):
        items = list(spec.items())
    elif isinstance(spec, str):
        text = spec.strip()
        if "=" not in text:
            method = _method(text, spec)
            return [] if method == "none" else [("Conv2d" if method == "pool2" else "*", method)]
        items = []
        for rule in text.split(";"):
            selector, sep, method = rule.partition("=")
            if not sep or not selector.strip():
                raise ValueError(f"compress: rule {rule!r} in {spec!r} is not selector=method; accepted: "
                                 "'Conv2d=pool2;ReLU=bf16', 'layer1.*=fp8', or a bare method")
            items.append((selector.strip(), method))
    else:
        raise TypeError(f"compress: spec {spec!r} is neither a str, a mapping nor None")
    rules: list[tuple[Selector, str]] = []
    for selector, method in items:
        if not (isinstance(selector, str) or (isinstance(selector, type) and issubclass(selector, nn.Module))):
            raise TypeError(f"compress: selector {selector!r} is neither a str nor an nn.Module subclass")
        rules.append((selector, _method(method, spec)))
    return rules


def _method(text: str, spec: object) -> str:
    method = str(text).strip().lower()
    if method not in METHODS:
        raise ValueError(f"compress: unknown method {text!r} in {spec!r}; accepted: {', '.join(METHODS)}")
    return method


def _matches(selector: Selector, name: str | None, module: nn.Module) -> bool:
    if isinstance(selector, type):
        return isinstance(module, selector)
    if selector == "*" or selector == type(module).__name__:  # "*" also without a model (enable())
        return True
    return name is not None and fnmatch.fnmatchcase(name, selector)


def method_of(rules: list[tuple[Selector, str]], name: str | None, module: nn.Module) -> str | None:
    """The method the last matching rule gives module, or None when no rule
    applies (pool2 applies to nn.Conv2d only)."""
    method = None
    for selector, m in rules:
        if _matches(selector, name, module) and (m != "pool2" or isinstance(module, nn.Conv2d)):
            method = m
    return method
