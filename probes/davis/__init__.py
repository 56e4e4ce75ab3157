"""``moco eval davis``: semi-supervised video object segmentation on DAVIS-2017 val by label propagation on a frozen
backbone's patch features (DINO's protocol), scored by J, F and J&F as davis2017-evaluation scores them.

:mod:`.layout` reads the release layout, :mod:`.embedded` writes generated videos in it, :mod:`.propagate` carries
the first frame's masks through a video, :mod:`.metrics` scores them and :mod:`.run` joins these for one backbone.
"""
