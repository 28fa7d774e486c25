"""``extras-checkpointing``: recompute block activations in the backward pass, blocks found by attribute path.

ampsuite ships ``activation-checkpointing``, which finds a model's blocks where its
workload names them (``TrainStep.blocks``). This example finds them by an
attribute path instead, so it also reaches models whose workloads name no
blocks; it is kept as a complete third-party technique with a report section.
The two cannot share a combination.

A training step normally keeps every intermediate activation of the forward
pass until backward needs it. Checkpointing a block keeps only the block's
inputs and runs its forward a second time during backward, so peak memory
falls by roughly the activations inside the checkpointed blocks while the
step costs one extra forward of each. Mixed precision and checkpointing are
the two usual answers to "the batch does not fit"; a suite can measure both
and their combination.

Which modules are "blocks": the ``nn.ModuleList`` or ``nn.Sequential`` found at
``model.<attribute>`` (``blocks`` by default, as in timm's ViT and in
``lstm-lm``; ``encoder.layer`` for Hugging Face BERT). A model without one
makes the cell *skipped* with the reason, from inside the worker
(:class:`ampsuite.SkipCell`); a workload that has no model at all (it builds
its own step) is skipped earlier, when the matrix is expanded: the technique
declares the trait it needs in ``requires_traits``.

How: each chosen block is replaced in its container by a :class:`Checkpointed`
wrapper that calls :func:`torch.utils.checkpoint.checkpoint` with
``use_reentrant=False``, the variant that works with ``torch.compile``,
autocast (the recomputation replays the autocast state) and inputs that do
not require gradients. Parameter *names* gain a ``.block`` component
(``blocks.0.lstm.weight_ih_l0`` becomes ``blocks.0.block.lstm.weight_ih_l0``);
the parameters themselves are the same objects, so the optimizer that the
workload built keeps working.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ampsuite import ReportSection, Technique, hookimpl, lazy

AMPSUITE_PLUGIN_API = 1
"""The ampsuite plugin API this module was written for (checked when it is loaded)."""


NAME = "extras-checkpointing"


NOTES_KEY = "extras_checkpointing"


ATTRIBUTE_PATH = r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*"
"""A dotted Python attribute path (``blocks``, ``encoder.layers``)."""


ORDER = 25
"""After the loaders (10) and channels-last (20), which do not touch the blocks;
before autocast (30), fp32 islands (40), torch.compile (80) and CUDA graphs (90),
which must see the wrapped blocks."""


@dataclass(frozen=True)
class CheckpointOptions:
    """Options of ``extras-checkpointing``."""

    attribute: str = field(
        default="blocks",
        metadata={
            "help": "dotted path from the model to its blocks (an nn.ModuleList or nn.Sequential)",
            "pattern": ATTRIBUTE_PATH,
        },
    )
    every: int = field(default=1, metadata={"help": "checkpoint blocks 0, N, 2N, ... (1: every block)", "ge": 1})
    preserve_rng_state: bool = field(
        default=True, metadata={"help": "replay dropout exactly in the recomputation (saves the RNG state per block)"}
    )


def _techniques(record: Mapping[str, Any]) -> frozenset[str]:
    return frozenset(t["name"] for t in record.get("techniques", []))


def _reference_key(record: Mapping[str, Any], techniques: frozenset[str]) -> tuple[str, int, frozenset[str]]:
    workload = str(record["id"]).split("/", 1)[0]  # the workload id with its option axes
    return workload, int(record["batch_size"]), techniques


def _median(record: Mapping[str, Any] | None) -> float | None:
    value = ((record or {}).get("metrics") or {}).get("step_time", {}).get("median")
    return float(value) if isinstance(value, int | float) else None


def _memory(record: Mapping[str, Any] | None) -> float | None:
    value = ((record or {}).get("metrics") or {}).get("peak_memory_bytes")
    return float(value) if isinstance(value, int | float) else None


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:.1f} MiB"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.2f} ms"


def _ratio(new: float | None, old: float | None) -> str:
    return "-" if new is None or not old else f"{new / old:.2f}x"


def _rows(docs: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    rows = []
    for doc in docs:
        cells = doc.get("cells", [])
        index = {_reference_key(r, _techniques(r)): r for r in cells}
        for record in cells:
            names = _techniques(record)
            if NAME not in names:
                continue
            reference = index.get(_reference_key(record, names - {NAME}))
            notes = (record.get("notes") or {}).get(NOTES_KEY) or {}
            if record.get("status") == "passed":
                what = f"{len(notes.get('checkpointed', []))} of {notes.get('blocks', '?')} blocks"
            else:
                what = f"{record.get('status')}: {(record.get('evidence') or {}).get('reason', '')}".strip()
            rows.append(
                [
                    str(record["id"]),
                    str(reference["id"]) if reference else "-",
                    what,
                    _mib(_memory(record)),
                    _ratio(_memory(record), _memory(reference)),
                    _ms(_median(record)),
                    _ratio(_median(record), _median(reference)),
                ]
            )
    return rows


HEADER = [
    "cell",
    "compared with",
    "checkpointed",
    "peak memory",
    "memory vs. reference",
    "step time",
    "time vs. reference",
]


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name=NAME,
            summary="recompute each block's activations in backward (torch.utils.checkpoint): less memory, more time",
            apply=lazy("ampsuite_extras._checkpointing:apply"),
            options=CheckpointOptions,
            order=ORDER,
            conflicts=frozenset({"activation-checkpointing"}),
            requires_traits=frozenset({"model"}),
        )
    ]


@hookimpl
def ampsuite_report_sections(results: Sequence[Mapping[str, Any]]) -> Iterable[ReportSection]:
    rows = _rows(results)
    if not rows:
        return []
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADER)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    intro = (
        "Each checkpointed cell against the same workload, batch size and other techniques without "
        "checkpointing: the memory it saves and the recomputation it pays for."
    )
    markdown = "\n".join(
        [intro, "", "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        + ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    )
    return [
        ReportSection(
            title="Activation checkpointing (extras)",
            html=f"<p>{html.escape(intro)}</p><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>",
            markdown=markdown,
            anchor=NAME,
        )
    ]
