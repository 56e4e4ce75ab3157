"""The ``moco`` command: joins the sub-commands of each package, nothing more."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from classification import cli as classification_cli
from cluster import cli as cluster_cli
from dense import cli as dense_cli
from moco_core import cli as core_cli
from moco_core.config import did_you_mean
from moco_core.errors import UserError, print_error
from moco_core.terminal import guard_process_output, guarded_output
from moco_demo import cli as demo_cli
from probes import cli as probes_cli
from reports import cli as reports_cli
from sweeps import cli as sweeps_cli
from transfer import cli as transfer_cli

# In the order of a study: pretrain, evaluate, tabulate; then the wrappers that repeat, sweep or submit those.
WORKFLOW = ["pretrain", "eval", "report", "trials", "sweep", "bench", "demo", "launch", "convert"]


class OneLineUsageErrors(TyperGroup):
    """Every command's output goes through :func:`moco_core.terminal.guarded_output`: control characters from
    file names, records or config values are shown escaped, never sent to the terminal.

    A usage error (a bad option value, a missing argument) is one line, ``error: ...``, and exit code 2, like
    every other error of the suite, instead of a usage box that repeats a value of any length; so is an OSError
    that no check named first (a file name too long for the filesystem, a path the system refuses)."""

    def main(self, args: list[str] | None = None, *rest: Any, **kwargs: Any) -> Any:
        with guarded_output():
            try:
                argv = core_cli.old_forms(list(sys.argv[1:] if args is None else args))
            except UserError as err:  # a --set without '=': said before the parser calls it an extra argument
                print_error(err)
                sys.exit(2)
            return self._main(argv, *rest, **kwargs)

    def list_commands(self, ctx: Any) -> list[str]:  # a study's order: typer would list sub-groups (eval) last
        names = super().list_commands(ctx)
        return sorted(names, key=lambda n: WORKFLOW.index(n) if n in WORKFLOW else len(WORKFLOW))

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            ctx.fail(f"no such command {name!r}{did_you_mean(name, self.list_commands(ctx))}; commands: "
                     f"{', '.join(self.list_commands(ctx))}")
        return super().resolve_command(ctx, args)

    def _main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except OSError as err:  # what a path or the system refused, where no check named it first
            if err.errno is None:
                raise
            where = f": {str(err.filename)[:200]}" if err.filename else ""
            print_error(f"{err.strerror or err}{where}")
            sys.exit(2)
        except Exception as err:
            if type(err).__name__ == "NoArgsIsHelpError":  # ``moco`` alone: the help, as typer shows it
                return super().main(*args, standalone_mode=True, **kwargs)
            if not hasattr(err, "format_message"):  # not a usage error
                raise
            print_error(" ".join(str(err.format_message()).split()) + " (see --help)")
            sys.exit(getattr(err, "exit_code", 2))
        sys.exit(code if isinstance(code, int) else 0)


HELP = ("MoCo v1/v2/v3 pretraining (Momentum Contrast, arXiv 1911.05722, 2003.04297, 2104.02057), and the "
        "evaluation of any self-supervised checkpoint by the papers' protocols: linear, kNN, few-shot, "
        "fine-tuning, the transfer suite, detection and segmentation; reports, sweeps and cluster launches.")


def _version(show: bool) -> None:
    if show:
        from moco_core import __version__

        print(f"moco {__version__}")
        raise typer.Exit()


app = typer.Typer(
    name="moco", cls=OneLineUsageErrors, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help=HELP,
)


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    del version  # handled by its callback; the help is the Typer's (HELP)


app.command("pretrain")(core_cli.pretrain_cli)

eval_app = typer.Typer(cls=OneLineUsageErrors, no_args_is_help=True, help="Evaluate a pretrained backbone.")
eval_app.command("linear")(classification_cli.linear_cli)
eval_app.command("finetune")(classification_cli.finetune_cli)
eval_app.command("knn")(classification_cli.knn_cli)
eval_app.command("snapshots")(classification_cli.snapshots_cli)
eval_app.command("transfer")(classification_cli.transfer_cli)
eval_app.command("voc")(transfer_cli.voc_cli)
eval_app.command("coco")(transfer_cli.coco_cli)
eval_app.command("lvis")(transfer_cli.lvis_cli)
eval_app.command("cityscapes")(transfer_cli.cityscapes_cli)
eval_app.command("keypoints")(transfer_cli.keypoints_cli)
eval_app.command("densepose")(transfer_cli.densepose_cli)
eval_app.command("semseg")(transfer_cli.semseg_cli)
eval_app.command("linseg")(dense_cli.linseg_cli)
eval_app.command("retrieval")(probes_cli.retrieval_cli)
eval_app.command("davis")(probes_cli.davis_cli)
app.add_typer(eval_app, name="eval")

app.command("report")(reports_cli.report_cli)
app.command("trials", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(
    cluster_cli.trials_cli)
app.command("sweep")(sweeps_cli.sweep_cli)
app.command("bench")(cluster_cli.bench_cli)
app.command("demo")(demo_cli.demo_cli)
app.command("launch", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(
    cluster_cli.launch_cli)
app.command("convert")(transfer_cli.convert_cli)


def main() -> None:
    guard_process_output()  # for the whole process: a traceback is printed after app() has returned
    app()


if __name__ == "__main__":
    main()
