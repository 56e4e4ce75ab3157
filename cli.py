"""The ``moco`` command: joins the sub-commands of each package, nothing more."""

from __future__ import annotations

import typer

from lincls import cli as lincls_cli
from moco_core import cli as core_cli
from moco_demo import cli as demo_cli
from reports import cli as reports_cli
from sweeps import cli as sweeps_cli
from transfer import cli as transfer_cli

app = typer.Typer(
    name="moco", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="MoCo (Momentum Contrast, arXiv 1911.05722): pretraining and the paper's downstream protocol.",
)
app.command("pretrain")(core_cli.pretrain_cli)
app.command("sweep")(sweeps_cli.sweep_cli)

eval_app = typer.Typer(no_args_is_help=True, help="Evaluate a pretrained backbone.")
eval_app.command("linear")(lincls_cli.linear_cli)
eval_app.command("knn")(lincls_cli.knn_cli)
eval_app.command("voc")(transfer_cli.voc_cli)
eval_app.command("coco")(transfer_cli.coco_cli)
app.add_typer(eval_app, name="eval")

app.command("convert")(transfer_cli.convert_cli)
app.command("report")(reports_cli.report_cli)
app.command("demo")(demo_cli.demo_cli)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
