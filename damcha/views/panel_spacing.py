"""Room between the columns of a subplot grid at the width a figure is exported at: between two
neighbouring panels stand the left one's colour bar (bar, tick labels, title along it) and right-side
axis labels, and the right one's y tick labels and title. A grid spaced for the screen by fractions of
its width puts these on each other, or on the neighbouring panel, at a journal's single column; here
the gaps are set in pixels from what stands in them, and the panels share what is left."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import plotly.graph_objects as go

from damcha.views.plotly_arrays import trace_array, trace_items

BAR_PAD = 4  # px between a panel and its colour bar, and around what stands in a gap
TICK_PAD = 6  # px between an axis and its tick labels


@dataclass
class _Column:
    domain: tuple[float, float]
    axes: list[str] = field(default_factory=list)  # x axis names: "xaxis", "xaxis2", ...
    left: float = 0.0  # px the column's panels need on their left (y tick labels and title)
    right: float = 0.0  # px they need on their right (colour bars, right-side y labels)


def _text_px(chars: int, font_size: float, character_width: float) -> float:
    return chars * character_width * font_size


def _number_chars(values: np.ndarray) -> int:
    """Characters of the longest automatic tick label over values' range (a sign, digits, a point)."""
    finite = values[np.isfinite(values)]
    if not finite.size:
        return 3
    lo, hi = float(finite.min()), float(finite.max())
    return max(len(f"{v:.2g}".replace("-", "−")) for v in (lo, hi, (lo + hi) / 2, (hi - lo) / 4 or hi))


def _trace_values(trace, letter: str) -> np.ndarray:
    data = trace_array(getattr(trace, letter, None))
    if data is None and trace.type in ("heatmap", "contour") and trace.z is not None:
        z = np.asarray(trace_array(trace.z), dtype=object)
        return np.array([0.0, float(z.shape[0 if letter == "y" else 1] - 1)]) if z.ndim == 2 else np.array([0.0])
    try:
        return np.asarray(data, dtype=float).ravel() if data is not None else np.array([])
    except (TypeError, ValueError):  # category names
        return np.array([])


def _tick_label_chars(fig: go.Figure, axis_name: str, traces: list) -> int:
    axis = fig.layout[axis_name]
    if axis.showticklabels is False:
        return 0
    if axis.ticktext is not None or axis.tickvals is not None:
        labels = axis.ticktext if axis.ticktext is not None else axis.tickvals
        return max((len(str(t)) for t in labels), default=0)
    letter = axis_name[0]
    values = [_trace_values(t, letter) for t in traces]
    names = [v for t in traces if getattr(t, letter, None) is not None for v in trace_items(getattr(t, letter))
             if isinstance(v, str)]
    if names:
        return max(len(n) for n in names)
    numbers = np.concatenate(values) if values else np.array([])
    if axis.range is not None:
        numbers = np.asarray([v for v in axis.range if v is not None], dtype=float)
    return _number_chars(numbers) if numbers.size else 3


def _colour_bar_px(trace, font_size: float, character_width: float, line: float) -> float:
    bar = trace.colorbar
    values = np.array([v for v in (trace.zmin, trace.zmax) if v is not None], dtype=float)
    if values.size < 2 and getattr(trace, "z", None) is not None:
        try:
            values = np.asarray(trace_array(trace.z), dtype=float).ravel()
        except (TypeError, ValueError):
            values = np.array([0.0, 1.0])
    size = bar.tickfont.size or font_size
    ticks = _text_px(_number_chars(values), size, character_width)
    title = line * (bar.title.font.size or font_size) if bar.title and bar.title.text else 0.0
    return BAR_PAD + (bar.thickness or 30) + TICK_PAD + ticks + title + BAR_PAD


def _columns(fig: go.Figure) -> tuple[list[_Column], list[tuple[str, int, int]]] | None:
    """The grid's columns (the x domains that hold no other) and every x axis with the first and last
    column it spans (a panel under two columns spans both); None where domains overlap in part."""
    domains: dict[tuple[float, float], list[str]] = {}
    for name in fig.layout.to_plotly_json():
        if name.startswith("xaxis"):
            d = fig.layout[name].domain or (0.0, 1.0)
            domains.setdefault((round(float(d[0]), 6), round(float(d[1]), 6)), []).append(name)

    def inside(inner: tuple[float, float], outer: tuple[float, float]) -> bool:
        return outer[0] - 1e-6 <= inner[0] and inner[1] <= outer[1] + 1e-6

    columns = sorted((_Column(d) for d in domains if not any(o != d and inside(o, d) for o in domains)),
                     key=lambda c: c.domain[0])
    placed = []
    for domain, names in domains.items():
        covered = [i for i, c in enumerate(columns) if inside(c.domain, domain)]
        if not covered or any(not inside(c.domain, domain) and c.domain[0] < domain[1] and domain[0] < c.domain[1]
                              for c in columns):
            return None
        for name in names:
            columns[covered[0]].axes.append(name)
            placed.append((name, covered[0], covered[-1]))
    return columns, placed


def _axis_ref(name: str) -> str:
    return name[0] + name[5:]  # "xaxis2" -> "x2"


def space_columns(fig: go.Figure, width_px: int, font_size: float, character_width: float, line: float) -> None:
    """In place: the grid's columns moved apart by what stands between them at `width_px` (x domains,
    colour bars, subplot titles and paper-placed shapes move with their column; margins take the outer
    columns' needs). Figures of one column, or with 3-D scenes, are left as they are."""
    found = _columns(fig)
    if found is None or len(found[0]) < 2 or any(k.startswith("scene") for k in fig.layout.to_plotly_json()):
        return
    columns, placed = found
    for x_name, first, last in placed:
        x_ref = _axis_ref(x_name)
        y_ref = fig.layout[x_name].anchor or ("y" + x_ref[1:])
        y_name = "yaxis" + y_ref[1:]
        if y_name not in fig.layout.to_plotly_json():
            continue
        traces = [t for t in fig.data if (getattr(t, "xaxis", None) or "x") == x_ref]
        y_axis = fig.layout[y_name]
        labels = _text_px(_tick_label_chars(fig, y_name, traces), font_size, character_width) + TICK_PAD
        title = (y_axis.title.text.count("<br>") + 1) * line * font_size + BAR_PAD if y_axis.title.text else 0.0
        if y_axis.side == "right":
            columns[last].right = max(columns[last].right, labels + title + BAR_PAD)
        else:
            columns[first].left = max(columns[first].left, labels + title + BAR_PAD)
        for t in traces:
            if getattr(t, "colorbar", None) is not None and t.showscale is not False and t.colorbar.x is not None:
                columns[last].right = max(columns[last].right, _colour_bar_px(t, font_size, character_width, line))
    margin = fig.layout.margin
    left_margin = max(margin.l if margin.l is not None else 50, columns[0].left)
    right_margin = max(margin.r if margin.r is not None else 20, columns[-1].right)
    plot = width_px - left_margin - right_margin
    gaps = [a.right + b.left for a, b in zip(columns, columns[1:])]
    widths = np.array([c.domain[1] - c.domain[0] for c in columns])
    room = plot - sum(gaps)
    if room < 40 * len(columns):  # nothing sensible fits: leave the screen's layout to the overlap test
        return
    shares = widths / widths.sum() * room / plot
    new, x = [], 0.0
    for k, share in enumerate(shares):
        new.append((x, x + share))
        x += share + (gaps[k] / plot if k < len(gaps) else 0.0)
    fig.update_layout(margin=dict(l=int(left_margin), r=int(right_margin)))
    _move(fig, columns, placed, new, plot)


def _move(fig: go.Figure, columns: list[_Column], placed: list[tuple[str, int, int]], new: list[tuple[float, float]],
          plot: float) -> None:
    spans = {(columns[first].domain[0], columns[last].domain[1]): (new[first][0], new[last][1])
             for _, first, last in placed if first != last}
    olds = [c.domain for c in columns]
    for name, first, last in placed:
        fig.layout[name].domain = [min(1.0, max(0.0, v)) for v in (new[first][0], new[last][1])]
    for trace in fig.data:
        bar = getattr(trace, "colorbar", None)
        if bar is not None and bar.x is not None:
            bar.x = _moved_x(bar.x, list(zip(olds, new)), olds, new, plot)
            bar.xanchor, bar.xpad = "left", 0
    inside = [*zip(olds, new), *spans.items()]
    for annotation in fig.layout.annotations:
        if annotation.xref == "paper" and annotation.x is not None:
            annotation.x = _moved_x(annotation.x, inside, olds, new, plot)
    for shape in fig.layout.shapes:
        if shape.xref == "paper":
            shape.x0, shape.x1 = (_moved_x(x, inside, olds, new, plot) for x in (shape.x0, shape.x1))


def _moved_x(x: float, inside: list, olds: list[tuple[float, float]], new: list[tuple[float, float]],
             plot: float) -> float:
    """A paper x inside one of the old domains of `inside` (old -> new pairs: the columns, and for what is
    not a colour bar the spanning panels) at the same place in the new one; else just right of the column
    it stands beside (a colour bar)."""
    for (d0, d1), (a, b) in inside:
        if d0 - 1e-6 <= x <= d1 + 1e-6:
            return a + (x - d0) / (d1 - d0) * (b - a)
    for (_, d1), (_, b) in zip(reversed(olds), reversed(new)):
        if x > d1:
            return b + BAR_PAD / plot
    return x
