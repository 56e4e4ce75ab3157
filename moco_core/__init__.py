"""MoCo pretraining core: the model, its data, the training loop and the checkpoint format."""

__version__ = "0.1.0"
