"""Frozen-feature evaluation: a pretrained backbone read once, its features fed to many readers.

``features`` (the features of a dataset computed once, in one forward pass at the backbone's taps
(:mod:`moco_core.model.taps`), and cached on disk under a key that says what made them); their readers: ``heads``
(a grid of linear heads trained on one pass a batch), ``grid`` and ``grid_config`` (``moco eval linear --grid``),
``selection`` (the held-out split the grid's head is chosen on), ``logreg`` and ``metrics`` (L2 logistic
regression and its scores), ``fewshot`` and ``shots`` (k images a class: ``moco eval linear --shots``).
"""
