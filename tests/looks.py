"""Shared by the tests of the suite's figures: whether two colours look alike (CIELAB
ΔE*76 from sRGB, written out here from the standard's formulas, not taken from the code
under test), whether two algorithms' looks in a figure can be told apart, and whether a
figure's legend stands clear of its axes."""

from __future__ import annotations

import math

#: ΔE*76 below which two colours are taken for the same in a figure: tab10's closest pair
#: (purple and pink) is 27.7 apart, tab20's dark and light shades of one hue 30 or more
ALIKE = 20.0


def _linear(c: float) -> float:
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def lab(rgb) -> tuple[float, float, float]:
    """CIELAB (D65) of an sRGB colour in [0, 1]."""
    r, g, b = (_linear(float(c)) for c in rgb[:3])
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return math.cbrt(t) if t > 0.008856 else 7.787 * t + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def delta_e(a, b) -> float:
    return math.dist(lab(a), lab(b))


def told_apart(a: tuple, b: tuple) -> bool:
    """Two looks ``(colour, *marks)`` (marks: a marker, a line style, a hatch, ...): their
    colours are not alike, or every one of their marks differs."""
    if delta_e(a[0], b[0]) >= ALIKE:
        return True
    return all(x != y for x, y in zip(a[1:], b[1:], strict=True))


def assert_legend_outside(fig, *, entries: int) -> None:
    """The figure's one legend, of ``entries`` entries, within the figure and over no axes
    (the figure drawn already)."""
    renderer = fig.canvas.get_renderer()
    (legend,) = fig.legends
    assert len(legend.get_texts()) == entries
    box, page = legend.get_window_extent(renderer), fig.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1
    for ax in fig.axes:
        assert not ax.get_window_extent(renderer).overlaps(box), (ax, box)
    assert not any(ax.get_legend() for ax in fig.axes)
