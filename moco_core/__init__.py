"""MoCo pretraining core: the model, its data, the training loop and the checkpoint format.

``data/`` reads and augments images, ``model/`` holds the networks and methods, ``run/`` trains them into a run
directory; what all three share (config, errors, checkpoints, distributed helpers, threads, the smoke mode, the
terminal) stays at this level, beside ``cli.py``."""

__version__ = "0.1.0"
