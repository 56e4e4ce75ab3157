"""Frozen-feature machinery every probe shares (classification's linear transfer and few-shot, the dense probes):
``features`` (a dataset's features computed once at the backbone's taps and cached on disk under a key that says
what made them) and ``logreg`` (L2 logistic regression fitted by L-BFGS in torch, with its regularisation sweep)."""
