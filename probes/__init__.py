"""Training-free probes of frozen features: retrieval (and video label propagation, by a sibling)."""
