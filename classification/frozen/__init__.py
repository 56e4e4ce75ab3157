"""Frozen-feature evaluation: a pretrained backbone read once, its features fed to many readers.

``taps`` (which features a backbone is read at: a ResNet's pooled stages, a ViT's class tokens of its last blocks
with or without the average of its patch tokens, all in one forward pass) and ``features`` (the features of a
dataset computed once, in that one pass, and cached on disk under a key that says what made them); their
readers: ``heads`` (a grid of linear heads trained on one pass a batch), ``grid`` and ``grid_config`` (``moco eval
linear --grid``), ``selection`` (the held-out split the grid's head is chosen on), ``logreg`` and ``metrics`` (L2
logistic regression and its scores), ``fewshot`` and ``shots`` (k images a class: ``moco eval linear --shots``).
"""
