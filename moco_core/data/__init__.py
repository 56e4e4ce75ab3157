"""The pretraining data: image folders scanned and decoded (``data``, ``image_files``, ``jpeg``), the embedded
shapes dataset (``shapes``), the two-crop augmentations as PIL transforms (``augment``) and as batched tensor
ops (``tensor_augment``), and the loader that decodes and augments on the training device (``device_data``).
Nothing here imports ``moco_core.model`` or ``moco_core.run``; import the module, e.g.
``from moco_core.data.augment import build_two_crops``."""
