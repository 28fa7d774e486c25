"""ampsuite-extras: plugins that ampsuite does not ship.

* ``lstm-lm`` (module :mod:`ampsuite_extras.lstm`): a stacked-LSTM language
  model on a synthetic, learnable token stream; throughput in tokens/s.
* ``extras-checkpointing`` (module :mod:`ampsuite_extras.checkpointing`):
  recompute each block's activations in the backward pass instead of keeping
  them, trading step time for memory.

ampsuite finds both through the ``ampsuite`` entry points in pyproject.toml;
nothing here is imported by ampsuite except through them.
"""

__version__ = "0.1.0"
