"""A pretraining run from config to run directory: setup (``train``), one epoch (``engine``), the run directory
and its files (``rundir``, ``naming``, ``records``), progress and metrics (``progress``, ``loggers``), stopping
and resuming (``preemption``), device and data resolution (``runtime``) and the kNN monitor (``knn``). It uses
``moco_core.data`` and ``moco_core.model``; neither uses it. Import the module, e.g.
``from moco_core.run.train import pretrain``."""
