"""Semantic segmentation by fine-tuning (``moco eval semseg``, the MoCo paper's appendix A.5): the config
(``config``), the FCN on a dilated ResNet (``model``), the datasets (``datasets``: VOC2012 with SBD's augmented set,
Cityscapes, one's own folders; ``pairs``: their image and label files checked before anything trains), the embedded
set (``embedded``), mean IoU and pixel accuracy from a confusion matrix (``metrics``) and the run (``run``)."""
