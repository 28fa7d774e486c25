"""Techniques that are variants of one another, so a combination holds one of them (torch-free; registers nothing).

``amp-fp16`` and ``amp-bf16``, ``pinned-loading`` and ``pageable-loading``: each variant's
implementation is ``IMPL:apply_KIND``, all sit at one order and need the same workload traits,
and each conflicts with the others.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ampsuite import CheckContext, NoOptions, Technique, lazy

__all__ = ["Variant", "variants"]


@dataclass(frozen=True)
class Variant:
    name: str
    kind: str
    """The suffix of its implementation's functions (``fp16``: ``apply_fp16``)."""
    summary: str
    options: type = NoOptions
    check: Callable[[CheckContext], str | None] | None = None


def variants(impl: str, *each: Variant, order: int, requires_traits: frozenset[str] = frozenset()) -> list[Technique]:
    """One record per variant, in the given order; ``impl`` is the torch-dependent module of them all."""
    names = frozenset(v.name for v in each)
    return [
        Technique(
            name=v.name,
            summary=v.summary,
            apply=lazy(f"{impl}:apply_{v.kind}"),
            options=v.options,
            order=order,
            conflicts=names - {v.name},
            check=v.check,
            requires_traits=requires_traits,
        )
        for v in each
    ]
