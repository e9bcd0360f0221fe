"""Shared figure helpers: loss curves and interactive figures that need no kernel.

The website is static: there is no Python behind it.  An interactive figure
there must carry all its states with it.  :func:`scrubber` turns a matplotlib
animation into a self-contained player (frames embedded, JavaScript controls),
and :func:`switcher` shows one of several precomputed figures or tables picked
with a slider.  Both work the same in a live notebook.  ipywidgets are for
live notebooks only (a static page shows them, but nothing recomputes).

Every picture these helpers embed is a palette PNG (at most 256 colours,
:func:`png_bytes`): line plots lose nothing visible and shrink several-fold,
which keeps a chapter's page light.  :func:`compact_inline` does the same for
the figures a notebook shows inline, and stores photographs as JPEG.
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import re
import tempfile
from pathlib import Path
from typing import Callable, Mapping, Sequence

import matplotlib

matplotlib.rcParams["animation.embed_limit"] = 64.0  # MB of frames a scrubber may embed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.animation import FuncAnimation, HTMLWriter  # noqa: E402

_ids = itertools.count()


class HTMLFigure:
    """HTML that Jupyter and the book's builder render as-is (``text/html``)."""

    def __init__(self, markup: str):
        self.markup = markup

    def _repr_html_(self) -> str:
        return self.markup

    def __str__(self) -> str:
        return self.markup


def png_bytes(fig, dpi: float | None = None, colors: int | None = 256, **savefig_kwargs) -> bytes:
    """``fig`` as PNG bytes, reduced to a palette of ``colors`` colours (None: full colour).

    Plots use a handful of colours, so a 256-colour palette is exact for lines
    and text and close for smooth shading, at a fraction of the bytes.
    """
    if colors is not None and not 2 <= colors <= 256:
        raise ValueError(f"colors must be between 2 and 256 (or None for full colour), got {colors}")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi if dpi is not None else fig.dpi, **savefig_kwargs)
    if colors is None:
        return buf.getvalue()
    from PIL import Image

    image = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    # median cut without dithering: dithered noise compresses badly and adds nothing to a plot
    palette = image.quantize(colors=colors, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    out = io.BytesIO()
    palette.save(out, format="PNG", optimize=True)
    return out.getvalue()


class _PaletteHTMLWriter(HTMLWriter):
    """matplotlib's HTML writer, with each embedded frame a palette PNG."""

    def __init__(self, *args, colors: int | None = 256, **kwargs):
        super().__init__(*args, **kwargs)
        self.colors = colors

    def grab_frame(self, **savefig_kwargs):
        if self._hit_limit:
            return
        data = base64.encodebytes(png_bytes(self.fig, dpi=self.dpi, colors=self.colors, **savefig_kwargs))
        self._total_bytes += len(data)
        if self._total_bytes >= self._bytes_limit:
            self._hit_limit = True  # matplotlib's rule: frames past the embed limit are dropped
        else:
            self._saved_frames.append(data.decode("ascii"))


def scrubber(
    fig,
    update: Callable[[int], object],
    frames: int | Sequence,
    interval: int = 200,
    dpi: float | None = None,
    colors: int | None = 256,
) -> HTMLFigure:
    """A frame-by-frame player of ``update(frame)`` redrawing ``fig``; works on the static site.

    All frames are rendered now and embedded as palette PNGs (``colors``, see
    :func:`png_bytes`; ``dpi`` defaults to the figure's), with play/step/slider
    controls in JavaScript.  The figure is closed so it is not shown twice.
    """
    anim = FuncAnimation(fig, update, frames=frames, interval=interval, blit=False)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "player.html"
        writer = _PaletteHTMLWriter(fps=1000 / interval, embed_frames=True, default_mode="once", colors=colors)
        anim.save(str(path), writer=writer, dpi=dpi if dpi is not None else fig.dpi)
        markup = path.read_text(encoding="utf-8")
    # matplotlib links Font Awesome 4 from a CDN for its button icons; the site is
    # offline and already ships Font Awesome (the theme's), so drop the remote link.
    markup = re.sub(r"<link[^>]+font-awesome[^>]*>", "", markup)
    plt.close(fig)
    return HTMLFigure(markup)


def figure_to_img(fig, dpi: int = 100, close: bool = True, colors: int | None = 256) -> str:
    """An ``<img>`` tag with the figure as an embedded palette PNG (see :func:`png_bytes`)."""
    png = png_bytes(fig, dpi=dpi, colors=colors, bbox_inches="tight")
    if close:
        plt.close(fig)
    data = base64.b64encode(png).decode("ascii")
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


def loss_curves(
    ax, losses: Sequence[float], val_losses: Sequence[tuple[int, float]] = (), smooth: int = 10, label: str = "train"
) -> None:
    """Training loss (raw and moving average) and validation points on ``ax``."""
    steps = range(1, len(losses) + 1)
    ax.plot(steps, losses, alpha=0.3, lw=0.8, color="C0")
    if smooth > 1 and len(losses) >= smooth:
        avg = [sum(losses[i - smooth : i]) / smooth for i in range(smooth, len(losses) + 1)]
        ax.plot(range(smooth, len(losses) + 1), avg, color="C0", label=f"{label} (moving avg {smooth})")
    if val_losses:
        s, v = zip(*val_losses)
        ax.plot(s, v, "o-", color="C1", label="validation")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy loss (nats/token)")
    ax.legend()


def _is_photo(fig) -> bool:
    """Whether ``fig`` shows a photograph-sized image (PNG palettes suit plots, not photos)."""
    return any(
        im.get_array() is not None and im.get_array().size >= PHOTO_PIXELS for ax in fig.axes for im in ax.images
    )


PHOTO_PIXELS = 50_000  # an image with at least this many values is stored as JPEG by compact_inline


def jpeg_bytes(fig, dpi: float | None = None, quality: int = 80, **savefig_kwargs) -> bytes:
    """``fig`` as JPEG bytes: far smaller than PNG for photographs, lossy for lines and text."""
    if not 1 <= quality <= 95:
        raise ValueError(f"quality must be between 1 and 95 (Pillow's useful range), got {quality}")
    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi if dpi is not None else fig.dpi, **savefig_kwargs)
    out = io.BytesIO()
    Image.open(io.BytesIO(buf.getvalue())).convert("RGB").save(out, format="JPEG", quality=quality, optimize=True)
    return out.getvalue()


def compact_inline(dpi: float | None = None, colors: int | None = 256, photo_quality: int | None = 80) -> None:
    """Show this notebook's inline matplotlib figures compactly: plots as palette PNGs, photos as JPEG.

    Call once near the top of a notebook; outside IPython it does nothing.
    A figure showing a photograph-sized image (``PHOTO_PIXELS``) becomes a
    JPEG of ``photo_quality`` (None: a palette PNG like the rest, see
    :func:`png_bytes`).  Figures keep their look; the notebook and the page get lighter.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    from matplotlib.figure import Figure

    # pyplot loads its backend at the first figure, and the inline backend then installs its own
    # formatters over any registered before: make it load now, so that ours are the ones that stay
    plt.close(plt.figure())

    def photo(fig) -> bool:
        return photo_quality is not None and _is_photo(fig)

    def as_png(fig):
        if (not fig.axes and not fig.images) or photo(fig):
            return None  # nothing to show, or shown as JPEG below
        return base64.b64encode(png_bytes(fig, dpi=dpi, colors=colors, bbox_inches="tight")).decode("ascii")

    def as_jpeg(fig):
        if not photo(fig):
            return None
        return base64.b64encode(jpeg_bytes(fig, dpi=dpi, quality=photo_quality, bbox_inches="tight")).decode("ascii")

    shell.display_formatter.formatters["image/png"].for_type(Figure, as_png)
    shell.display_formatter.formatters["image/jpeg"].for_type(Figure, as_jpeg)
