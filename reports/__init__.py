"""Tables like the paper's from evaluation records. Imports no other package of ours and no torch.

``moco report DIR... [--out report] [--formats md,csv,tex,html]`` reads every ``result.json`` and
``*.result.json`` below the directories and writes report.md, report.csv (long form), report.tex (booktabs) and a
self-contained report.html (plots as data URIs). Modules, in the order data flows:

* ``records``: finding and validating records; unusable files are listed with the reason. ``pretraining``:
  where weights came from and their labels; ``protocols``: what an evaluation ran, and the titles saying so.
* ``summary``: grouping trials by setting and pretraining; mean, sample std, n; differences to supervised.
* ``comparisons``: each row against a baseline row (random init, or ``--baseline``): difference, its standard
  error over trials, Welch's test.
* ``published``: the paper's and the official repository's numbers (published.csv) and when they match a setting.
* ``transfer``: the transfer suite's tables and paired tests; ``transfer_datasets``: whether a record is of the
  released dataset it is named after or one's own folder in its layout; ``transfer_fewshot``: its few-shot table.
* ``tables``: the tables as plain data; ``report``: building a report and the tidy CSV rows.
* ``render``: Markdown, CSV, LaTeX, HTML with escaping (``safe_text``: control characters, CSV formulas);
  ``plots``: matplotlib PNGs; ``screenshot``: Chromium.
"""

FORMATS = ("md", "csv", "tex", "html")  # what a report is written as (here: `moco --help` loads nothing more)
