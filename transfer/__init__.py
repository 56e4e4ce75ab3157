"""Transfer by fine-tuning the whole network (the MoCo paper's Table 6 protocols): ``detection`` (``moco eval
voc|coco|keypoints|lvis|cityscapes|densepose``: R-CNN detectors, their datasets, metrics and the detectron2
engine), ``segmentation`` (``moco eval semseg``: the FCN of appendix A.5 on VOC, Cityscapes or one's own set),
the fine-tuning engine both share (``engine``) and the config sections they share (``config``), the generated
scenes of their embedded data (``embedded``), their result record (``records``), ``moco convert`` (``convert``)
and the command lines (``cli``). detectron2 is imported lazily, only in this package. The frozen-feature linear
transfer suite (``moco eval transfer``) is :mod:`classification.linear_transfer`.
"""
