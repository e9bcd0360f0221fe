"""gputrain.plots: palette PNGs keep figures light, and the players still carry every frame."""

from __future__ import annotations

import base64
import io
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from PIL import Image  # noqa: E402

from gputrain import plots  # noqa: E402


def _line_figure():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot(range(50), [i * i % 17 for i in range(50)], label="a line")
    ax.legend()
    return fig


def test_png_bytes_is_a_palette_png_smaller_than_full_colour():
    fig = _line_figure()
    full, pal = plots.png_bytes(fig, colors=None), plots.png_bytes(fig, colors=256)
    plt.close(fig)
    assert Image.open(io.BytesIO(full)).mode in ("RGB", "RGBA")
    assert Image.open(io.BytesIO(pal)).mode == "P"
    assert len(pal) < len(full)


@pytest.mark.parametrize("colors", [0, 1, 257])
def test_png_bytes_refuses_an_impossible_palette(colors):
    fig = _line_figure()
    with pytest.raises(ValueError, match="between 2 and 256"):
        plots.png_bytes(fig, colors=colors)
    plt.close(fig)


def test_scrubber_embeds_one_palette_png_per_frame_and_no_remote_stylesheet():
    fig, ax = plt.subplots(figsize=(3, 2))
    (line,) = ax.plot([0, 1], [0, 0])
    markup = str(plots.scrubber(fig, lambda i: line.set_ydata([0, i]), frames=5, interval=100, dpi=50))
    frames = re.findall(r'data:image/png;base64,([A-Za-z0-9+/=\\\n]+)"', markup)  # lines end in a backslash
    assert len(frames) == 5
    first = Image.open(io.BytesIO(base64.b64decode(re.sub(r"[\\\n]", "", frames[0]))))
    assert first.mode == "P" and first.size == (150, 100)  # 3 x 2 inches at 50 dpi
    assert "font-awesome" not in markup


def test_figure_to_img_keeps_its_signature_and_embeds_a_png():
    tag = plots.figure_to_img(_line_figure(), dpi=60)
    assert tag.startswith('<img src="data:image/png;base64,')
    data = base64.b64decode(tag.split(",", 1)[1].split('"', 1)[0])
    assert Image.open(io.BytesIO(data)).mode == "P"


def test_jpeg_bytes_is_a_jpeg_and_refuses_a_silly_quality():
    fig = _line_figure()
    data = plots.jpeg_bytes(fig, dpi=50)
    assert Image.open(io.BytesIO(data)).format == "JPEG"
    with pytest.raises(ValueError, match="between 1 and 95"):
        plots.jpeg_bytes(fig, quality=100)
    plt.close(fig)


def test_a_photo_sized_image_is_recognised_and_a_plot_is_not():
    import numpy as np

    photo, ax = plt.subplots()
    ax.imshow(np.random.default_rng(0).random((300, 400, 3)))
    digit, ax2 = plt.subplots()
    ax2.imshow(np.zeros((8, 8)))
    assert plots._is_photo(photo) and not plots._is_photo(digit) and not plots._is_photo(_line_figure())
    plt.close("all")
