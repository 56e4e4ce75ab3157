"""Frozen dense probes: what a frozen backbone's patch features know, read by linear models (DINOv2's Tables 10
and 11, arXiv 2304.07193; issue 59). A ResNet's stage maps and a ViT's patch tokens come from
:class:`moco_core.model.taps.DenseTaps`; the feature cache and the logistic regression are
:mod:`moco_core.frozen`'s, shared with the classification probes; the scores are
:mod:`moco_core.segmentation_metrics`', shared with ``moco eval semseg``.

``data`` (ADE20K as released, and its embedded stand-in in the same layout), ``features`` (patch features and
patch-grid labels, extracted once and cached), ``linseg`` (``moco eval linseg``'s fast mode: per-patch logistic
regression, its strength chosen on held-out train images), ``config`` and ``cli``. Imports moco_core only.
"""
