"""Frozen-feature evaluation: a pretrained backbone read once, its features fed to many readers.

The features (computed once and cached) and the logistic regression live in :mod:`moco_core.frozen`, shared with
the dense probes; their readers here: ``heads`` (a grid of linear heads trained on one pass a batch), ``grid`` and
``grid_config`` (``moco eval linear --grid``), ``selection`` (the held-out split the grid's head is chosen on),
``metrics`` (the classification scores), ``fewshot`` and ``shots`` (k images a class: ``moco eval linear --shots``).
"""
