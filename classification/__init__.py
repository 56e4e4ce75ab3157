"""Image-classification evaluations of a pretrained backbone.

Today: the linear protocol of the MoCo papers (``linear``: v1/v2's and v3's, and its cached-feature variant),
weighted kNN (``knn``), fine-tuning end to end with 1% / 10% of the labels or on iNaturalist (``finetune``), the
linear protocol on every snapshot of a run (``snapshots``); the data they read (``splits``: ImageNet-style folders
and the embedded shapes; ``layouts``: iNaturalist; ``subsets``: label subsets) and ``moco eval`` 's
classification commands (``cli``); ``robustness``: the ImageNet-V2, -A, -R, -Sketch and ReaL test sets. Two rooms of
their own: ``frozen`` (one frozen pass, many readers: the linear head grid, few-shot, the logistic regression) and
``suite`` (``moco eval transfer``: the 12-dataset linear transfer benchmark).
"""
