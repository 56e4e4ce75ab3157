"""``moco demo``: the whole protocol on the embedded data in one command."""
