"""``moco sweep``: the paper's K and m ablations (pretraining, then evaluation, per value)."""
