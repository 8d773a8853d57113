"""Reading rendered pages: the share of coloured pixels in a region of a screenshot."""

from __future__ import annotations

from PIL import Image


def colored_share(img: Image.Image, box: tuple[int, int, int, int]) -> float:
    """Share of pixels in ``box`` that are clearly coloured (plot lines, bars), not white/grey/black."""
    region = img.convert("RGB").crop(box)
    pixels = list(region.getdata())
    colored = sum(1 for r, g, b in pixels if max(r, g, b) - min(r, g, b) > 60)
    return colored / len(pixels)
