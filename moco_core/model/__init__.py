"""The networks and the methods built on them: backbones (``backbone``, ``vit``, ``encoders``), MoCo v1/v2
(``moco``), MoCo v3 (``mocov3``), the other mechanisms of the paper's comparison (``mechanisms``), shuffled and
split BatchNorm (``batchnorm``), one ``Method`` per pretraining method (``methods``) and the optimizers
(``optimizers``). Nothing here imports ``moco_core.data`` or ``moco_core.run``; import the module, e.g.
``from moco_core.model.methods import build_method``."""
