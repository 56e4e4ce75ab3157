"""Tables like the paper's from evaluation records. Imports no other package of ours and no torch."""
