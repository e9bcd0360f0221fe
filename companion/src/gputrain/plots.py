"""Shared figure helpers: loss curves and interactive figures that need no kernel.

The website is static: there is no Python behind it.  An interactive figure
there must carry all its states with it.  :func:`scrubber` turns a matplotlib
animation into a self-contained player (frames embedded, JavaScript controls),
and :func:`switcher` shows one of several precomputed figures or tables picked
with a slider.  Both work the same in a live notebook.  ipywidgets are for
live notebooks only (a static page shows them, but nothing recomputes).
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import re
from typing import Callable, Mapping, Sequence

import matplotlib

matplotlib.rcParams["animation.embed_limit"] = 64.0  # MB of frames a scrubber may embed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.animation import FuncAnimation  # noqa: E402

_ids = itertools.count()


class HTMLFigure:
    """HTML that Jupyter and the book's builder render as-is (``text/html``)."""

    def __init__(self, markup: str):
        self.markup = markup

    def _repr_html_(self) -> str:
        return self.markup

    def __str__(self) -> str:
        return self.markup


def scrubber(fig, update: Callable[[int], object], frames: int | Sequence, interval: int = 200) -> HTMLFigure:
    """A frame-by-frame player of ``update(frame)`` redrawing ``fig``; works on the static site.

    All frames are rendered now and embedded as images, with play/step/slider
    controls in JavaScript.  The figure is closed so it is not shown twice.
    """
    anim = FuncAnimation(fig, update, frames=frames, interval=interval, blit=False)
    markup = anim.to_jshtml(default_mode="once")
    # matplotlib links Font Awesome 4 from a CDN for its button icons; the site is
    # offline and already ships Font Awesome (the theme's), so drop the remote link.
    markup = re.sub(r'<link[^>]+font-awesome[^>]*>', "", markup)
    plt.close(fig)
    return HTMLFigure(markup)


def figure_to_img(fig, dpi: int = 100, close: bool = True) -> str:
    """An ``<img>`` tag with the figure as an embedded PNG."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    if close:
        plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" style="max-width:100%" alt="figure"/>'


def switcher(views: Mapping[str, str], label: str = "", start: int = 0) -> HTMLFigure:
    """A slider over precomputed HTML views (figures from :func:`figure_to_img`, tables...).

    ``views`` maps a caption to its HTML.  Only the chosen view is visible;
    moving the slider shows another.  Plain HTML and one inline handler, so it
    runs on the static site without a kernel.
    """
    if not views:
        raise ValueError("switcher needs at least one view")
    uid = f"gt-switch-{next(_ids)}"
    keys = list(views)
    panes = "".join(
        f'<div class="{uid}-pane" data-caption="{html.escape(k)}" '
        f'style="display:{"block" if i == start else "none"}">{v}</div>'
        for i, (k, v) in enumerate(views.items())
    )
    handler = (
        f"var p=document.querySelectorAll('.{uid}-pane');"
        "for(var i=0;i<p.length;i++){p[i].style.display=(i==this.value)?'block':'none';}"
        f"document.getElementById('{uid}-cap').textContent=p[this.value].dataset.caption;"
    )
    slider = (
        f'<input type="range" min="0" max="{len(keys) - 1}" value="{start}" step="1" '
        f'style="width:60%" oninput="{handler}"/>'
    )
    return HTMLFigure(
        f'<div class="gt-switcher" id="{uid}"><div><b>{html.escape(label)}</b> {slider} '
        f'<span id="{uid}-cap">{html.escape(keys[start])}</span></div>{panes}</div>'
    )


def loss_curves(ax, losses: Sequence[float], val_losses: Sequence[tuple[int, float]] = (),
                smooth: int = 10, label: str = "train") -> None:
    """Training loss (raw and moving average) and validation points on ``ax``."""
    steps = range(1, len(losses) + 1)
    ax.plot(steps, losses, alpha=0.3, lw=0.8, color="C0")
    if smooth > 1 and len(losses) >= smooth:
        avg = [sum(losses[i - smooth:i]) / smooth for i in range(smooth, len(losses) + 1)]
        ax.plot(range(smooth, len(losses) + 1), avg, color="C0", label=f"{label} (moving avg {smooth})")
    if val_losses:
        s, v = zip(*val_losses)
        ax.plot(s, v, "o-", color="C1", label="validation")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy loss (nats/token)")
    ax.legend()
