"""The memory techniques a program opts into by name (docs/techniques.md).

- ``compress``: saved activations packed for backward (``tp.compress``);
- ``optim``: AdamA, which folds each gradient into the moments and frees it
  (``tp.optim.AdamA``);
- ``microbatch``: a batch run as micro-batches with one optimizer step
  (``tp.microbatch``);
- ``split``, ``split_loss``: operators run in chunks so that their full-size
  intermediates never exist (``tp.split_channels``, ``tp.split_cross_entropy``).

They stand on the allocator's face and the budget runtime; neither knows them
by name (scripts/check_py_layers.py): what the runtime needs from one is
handed to it through a registered callback. This file imports nothing, so
``tp.optim`` does not load compression.
"""
