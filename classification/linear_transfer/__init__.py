"""The linear transfer suite of ``moco eval transfer`` (Kornblith et al., arXiv 1805.08974; SimCLR appendix B.8;
DINOv2 Table 8): 12 datasets read in the layouts torchvision downloads (``readers``, ``catalog``), their splits
shipped or drawn and kept with the run (``splits``), their images as datasets (``images``), the embedded suite of
generated datasets in those layouts (``embedded``), the config (``config``) and the run, dataset by dataset
(``run``). The frozen features, the logistic regression and the metrics are the frozen-feature room's
(:mod:`classification.frozen`).
"""
