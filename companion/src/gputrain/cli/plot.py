"""``gputrain plot``: draw a run's metrics.csv."""

from __future__ import annotations


def _cmd_plot(args) -> int:
    from ..train.runlog import plot_log

    print(f"wrote {plot_log(args.log_dir, args.out)}")
    return 0


def _add_plot(sub) -> None:
    p_plot = sub.add_parser(
        "plot",
        help="draw a run's metrics.csv: loss, validation, learning rate, gradient norm",
        description="Draw the curves of a run's metrics.csv against the step: training and validation loss, "
        "learning rate and gradient norm, with the steps where the run was resumed or interrupted and its "
        "spikes and skipped updates marked.",
    )
    p_plot.add_argument("log_dir", metavar="LOG_DIR", help="the run's --log-dir (or its metrics.csv)")
    p_plot.add_argument(
        "--out", default=None, metavar="FILE.png", help="image to write; its suffix picks the format "
        "(default: metrics.png beside metrics.csv)",
    )  # fmt: skip
    p_plot.set_defaults(func=_cmd_plot)
