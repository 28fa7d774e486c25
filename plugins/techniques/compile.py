"""torch.compile: the model's forward (and, through AOTAutograd, its backward) compiled.

Compilation is lazy: it happens in the first call of the step, which the
worker times on its own (``first_step_seconds``), so compile time never lands
in step time. Inductor keeps an on-disk cache between processes; a warm cache
makes that first step shorter but does not change the timed steps.

``scope = "block"`` compiles each of the workload's repeated blocks
(``TrainStep.blocks``, the transformer layers) on its own and leaves the rest
of the model eager, as torchtitan does: every block shares one compiled graph
(same code, same shapes), so a deep model compiles about as fast as one block,
and FSDP2's hooks, which ``fsdp2`` (order 85) puts on each block, stay outside
the compiled code. A workload without the ``blocks`` trait is skipped at
expansion with the reason. ``ampsuite tune`` tries ``scope`` only where a
suite's ``[tune.torch-compile]`` table lists it (``scope = ["block"]``): on a
model without blocks every such candidate would be a skip.

Shapes are compiled static (``dynamic=False``): every workload feeds
fixed-size batches, and a recompile would show up as a slow timed step.

``mode`` is one of inductor's modes. ``reduce-overhead`` and ``max-autotune``
also capture CUDA graphs (cudagraph trees); the ``cuda-graphs`` technique refuses
to stack on them and says so. ``max-autotune`` searches matmul and convolution
templates at compile time, which can take many minutes for a large CNN.

Inductor settings
-----------------

``inductor`` is a table of ``torch._inductor.config`` settings, by their names
(dotted for the sub-configs), passed through to inductor, so a new knob needs no
code here::

    [techniques.torch-compile.inductor]
    coordinate_descent_tuning = true
    "triton.tile_reductions" = true
    "triton.prefer_nd_tiling" = true

``[combination_options.NAME.torch-compile.inductor]`` sets entries for one
combination; they go on top of ``[techniques.torch-compile.inductor]``'s entry by
entry, and ``[tune.torch-compile.inductor]`` lists values of entries for
``ampsuite tune`` to try (``combo_kernels = [true]``). An unquoted dotted key
(``triton.tile_reductions = true``) is the same entry as the quoted one.

torch.compile takes either a mode or an options dict, so with any entry the mode
is passed as its options (``torch._inductor.list_mode_options``) with the table's
entries on top; an entry can therefore also turn off something the mode sets
(``"triton.cudagraphs" = false``). The table applies to the inductor backend only.

Each entry is checked against this torch's ``torch._inductor.config`` when the
options are built (:func:`ampsuite.spec.options.build_options`, through the field's
``entry_type`` hook, ``_compile.setting_type``): the name must be a setting
(else the closest one is named), and the value must have the setting's type
(``bool``, ``int | None``, a ``Literal``...). Matrix expansion builds every cell's
options before any cell runs, so a typo is one line naming the file and the key
path (wrapped here)::

    suite.toml: techniques.torch-compile.inductor.tile_reductionz: not a
    torch._inductor.config setting of torch 2.14.1; did you mean 'triton.tile_reductions'?

Why there: the suite loader reads TOML without the registry, so it cannot know
that ``inductor`` is this technique's option, and registration (``ampsuite list``,
``--help``) must not import torch. Expansion is the first place that knows the
option's type, and every command that expands a suite (``run``, ``run --dry-run``,
``tune``) has imported torch already to find its device, so the check adds only
inductor's config module, and only for a table with entries; the worker builds
the options again and checks them against its own torch. Not a ``check`` hook: a
check returns a skip reason, and a misspelled setting is the suite file's error,
not a cell this machine cannot run. A setting this torch's inductor lacks (one of
another torch version) is refused the same way, the message naming the version.
Settings torch declares as callables or custom passes cannot be written in TOML
and are refused by type. ``cuda-graphs`` reads only ``mode`` to know whether
inductor captures graphs: a table entry ``"triton.cudagraphs" = true`` under the
default mode is not seen by it.

Settings worth knowing for training:

``coordinate_descent_tuning``
    inductor tunes the block sizes of each kernel it generates (Triton) by
    coordinate descent: the part of max-autotune that tunes inductor's own
    kernels, without the template search. Cold compiles take much longer.
``max_autotune_pointwise``
    each generated pointwise and reduction kernel is benchmarked over a few block
    configurations at compile time, again without the template search; it helps
    where batch norm's reductions are a large part of the step (ResNet-50).
``triton.tile_reductions`` with ``triton.prefer_nd_tiling``
    a reduction's kernel may tile over more than one dimension (inductor's
    documentation asks for the two together). Channels-last batch norm reduces
    each channel over batch x height x width with the channels contiguous, a
    column reduction this tiles well; it roughly doubles a cold compile.
``combo_kernels``
    horizontal fusion: independent kernels of one graph (under autocast, the
    casts of the weights to the AMP dtype) become one launch, fewer kernels a
    step.

AOTAutograd's cache under autocast
----------------------------------

Under autocast, on a torch whose AOTAutograd cache keys only whether autocast is
on and not its dtype (torch 2.11 and earlier; fixed by pytorch/pytorch#181564),
that cache is switched off for the cell: otherwise a bf16 cell is served the
fp16 graph an earlier fp16 cell left in the same cache folder, or the reverse,
and measures the other precision under its own name (a "bf16" compiled ResNet-50
then runs fp16 convolution kernels, faster than real bf16). Inductor's own cache
stays on (its key is the graph after AOTAutograd, casts included), so a warm
cache still saves most of the compile. The cell's notes say when the cache was
off.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ampsuite import CheckContext, Technique, hookimpl, lazy


@dataclass(frozen=True)
class CompileOptions:
    mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = field(
        default="default",
        # tune leaves out the max-autotune modes: compiling ResNet-50 with max-autotune ran past 7 minutes on an
        # H200, more than a tune budget of minutes; a suite that wants them declares them in [tune.torch-compile].
        metadata={"help": "inductor mode", "tune": ("default", "reduce-overhead")},
    )
    fullgraph: bool = field(default=False, metadata={"help": "fail instead of splitting the graph at a graph break"})
    backend: str = field(
        default="inductor", metadata={"help": "torch.compile backend ('aot_eager' to test plumbing)", "min_length": 1}
    )
    scope: Literal["model", "block"] = field(
        default="model",
        metadata={"help": "model: the whole model; block: each of the workload's blocks on its own", "tune": ()},
    )
    inductor: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "inductor settings on top of the mode's: [techniques.torch-compile.inductor] NAME = value, "
            "NAME a torch._inductor.config setting",
            "entry_type": lazy("ampsuite.plugins.techniques._compile:setting_type"),
        },
    )

    def __post_init__(self) -> None:
        if self.backend != "inductor" and self.mode != "default":
            raise ValueError(f"mode {self.mode!r} applies to the inductor backend only, got backend {self.backend!r}")
        if self.backend != "inductor" and self.inductor:
            raise ValueError(
                f"inductor settings ({', '.join(self.inductor)}) apply to the inductor backend only, "
                f"got backend {self.backend!r}"
            )


def check(ctx: CheckContext) -> str | None:
    if ctx.technique_options["torch-compile"].scope == "block" and "blocks" not in ctx.workload.traits:
        return f"scope 'block': workload {ctx.workload.name!r} names no repeated blocks (trait 'blocks')"
    return None


@hookimpl
def ampsuite_techniques() -> list[Technique]:
    return [
        Technique(
            name="torch-compile",
            summary="torch.compile the model (compile time is reported as first-step time, never step time)",
            apply=lazy("ampsuite.plugins.techniques._compile:apply"),
            options=CompileOptions,
            order=80,
            check=check,
        )
    ]
