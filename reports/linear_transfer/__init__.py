"""The linear transfer suite's tables (``moco eval transfer`` records): ``table`` (one column a dataset, a row a
pretraining, its trials, the mean over the datasets every row has, paired tests), ``datasets`` (which dataset a
record is of: the famous one only when it holds its released sizes, else the user's folder in its layout),
``fewshot`` (the suite's k-shot records, mean and spread over tries) and ``published`` (which published rows stand
beside a table: same solver protocol, same backbone family). Nothing here imports torch.
"""
