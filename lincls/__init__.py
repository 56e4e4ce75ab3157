"""Linear classification and kNN evaluation of frozen backbones (the paper's section 4.1 protocol)."""
