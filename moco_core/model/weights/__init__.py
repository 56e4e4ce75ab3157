"""Weights of any self-supervised method, read for evaluation: one module per family of files, and the entry point.

- :mod:`~moco_core.model.weights.detect`: ``read_weights(path, weights_format)``, the backbone, its method, encoder,
  normalisation, arch and SHA-256; the refusal of a file that does not say what it is.
- :mod:`~moco_core.model.weights.formats`: the methods (``--weights-format``) with their encoder and normalisation
  (torch-free).
- :mod:`~moco_core.model.weights.files`: reading a file without running anything in it (safetensors; weights-only
  pickles with inert stand-ins for the few objects training checkpoints pickle).
- The families: :mod:`moco` (ours, the official MoCo v1/v2/v3), :mod:`dino`, :mod:`dinov2`, :mod:`swav` (and
  DeepCluster-v2, SeLa-v2), :mod:`barlow`, :mod:`simclr` (the converters' v1 and v2), :mod:`mae`, :mod:`lightning`
  (solo-learn, lightly), :mod:`hub` (timm and transformers safetensors), :mod:`plain` (torchvision ResNets and ViTs,
  timm ViTs: any method's).
- Names: :mod:`resnet_names` (torchvision's ResNet names, CIFAR stems, lightly's and SimCLR v2's names),
  :mod:`vit_names` (timm's ViT names; DINOv2's, torchvision's and transformers' mapped to them).

``moco_core/model/backbone.py`` builds the networks from what is read here.
"""
