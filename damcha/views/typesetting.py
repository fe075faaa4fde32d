"""Figures typeset for a paper: column presets, subplot and figure titles wrapped to the width
they have, real subscripts, and a PDF that names its figure. Used by export's paper style."""

from __future__ import annotations

import io
import re

import plotly.graph_objects as go

from damcha.views.panel_spacing import space_columns
from damcha.views.plotly_arrays import trace_items
from damcha.views.square_panels import fit_square_rows, move_rows

# Sizes in CSS pixels at the export's 14 px text (see ExportSettings): a page prints 0.75 pt per px,
# so 460 px scaled into a 3.3 in column and 940 px into a 7 in double column both print their text
# at about 7.5 pt, the size journals ask for.
COLUMN_WIDTHS = {"single column": 460, "double column": 940}

# The width of an average character of the paper font, as a share of its size (Arial: about 0.5 for
# lower case, more for capitals and digits): what a title is wrapped at.
CHARACTER_WIDTH = 0.56

LINE = 1.3  # a line of text is about 1.3 times its font size high

# x_i, m_i, M_ij, W_Q, D~_k: one letter, an underscore and a short index read as a subscript (a
# word before the underscore is a name: val_nll, metric_mode).
_SUPERSCRIPT = re.compile(r"\^([A-Za-z0-9]{1,3})(?![A-Za-z0-9])")
_SUBSCRIPT = re.compile(r"(?<![A-Za-z0-9_~])([A-Za-zα-ωΑ-Ω]\u0303?)_([A-Za-z0-9]{1,3})(?![A-Za-z0-9_])")
# W~, D~: the code's and the docs' ASCII for a letter with a tilde (ColMHA's W̃_Q), drawn as one
_TILDED = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z])~")


def with_subscripts(text: str | None) -> str | None:
    """Underscore indices as HTML subscripts and caret indices as superscripts (plotly draws <sub>
    and <sup>): "m_i" -> "m<sub>i</sub>", "W_K^h" -> "W<sub>K</sub><sup>h</sup>". A name joined by
    underscores (metric_mode, head_2_x) is left alone. A letter written with a tilde after it (W~_Q) is drawn
    with the tilde over it (W̃<sub>Q</sub>)."""
    if not text:
        return text
    text = _TILDED.sub("\\1\u0303", text)
    text = _SUBSCRIPT.sub(lambda m: f"{m.group(1)}<sub>{m.group(2)}</sub>", text)
    return _SUPERSCRIPT.sub(lambda m: f"<sup>{m.group(1)}</sup>", text)


def wrapped(text: str | None, width_px: float, font_size: float) -> str | None:
    """A title broken into lines that fit `width_px` at `font_size` (existing breaks kept)."""
    if not text:
        return text
    chars = max(8, int(width_px / (CHARACTER_WIDTH * font_size)))
    lines = []
    for part in re.split(r"<br\s*/?>", text):
        lines += _filled(part, chars) or [""]
    return "<br>".join(lines)


def _visible(word: str) -> int:
    """The characters a word shows (its markup, such as <sub>i</sub>'s tags, takes no room)."""
    return len(re.sub(r"<[^>]+>", "", word))


def _filled(text: str, chars: int) -> list[str]:
    """Words filled into lines of at most `chars` visible characters (a longer word stands alone)."""
    lines: list[str] = []
    for word in text.split():
        if lines and _visible(lines[-1]) + 1 + _visible(word) <= chars:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def _subplot_width(fig: go.Figure, annotation) -> float:
    """The share of the plot width a subplot title may use: its subplot's x domain (subplot titles
    are annotations centred over their subplot at the top of its domain)."""
    x = float(annotation.x if annotation.x is not None else 0.5)
    best = 1.0
    for name in _layout_keys(fig, ("xaxis", "scene")):
        domain = fig.layout[name].domain.x if name.startswith("scene") else fig.layout[name].domain
        if domain and domain[0] - 1e-6 <= x <= domain[1] + 1e-6:
            best = min(best, domain[1] - domain[0])
    return best


def _layout_keys(fig: go.Figure, prefixes: tuple[str, ...]) -> list[str]:
    """The figure's layout entries named with one of the prefixes (xaxis, xaxis2, scene3, ...)."""
    return [k for k in fig.layout.to_plotly_json() if k.startswith(prefixes)]


def _typeset_texts(fig: go.Figure) -> list[tuple[object, str]]:
    """(object, attribute) of every text that takes real subscripts: the figure's title, subplot titles,
    axis titles, legend entries and colour-bar titles."""
    parts = [(fig.layout.title, "text"), *((a, "text") for a in fig.layout.annotations),
             *((fig.layout[name].title, "text") for name in _layout_keys(fig, ("xaxis", "yaxis")))]
    for trace in fig.data:
        parts.append((trace, "name"))
        colorbar = getattr(trace, "colorbar", None)
        if colorbar is not None:
            parts.append((colorbar.title, "text"))
    return parts


def has_raw_subscripts(fig: go.Figure) -> bool:
    """Whether subscripted() would change any of the figure's texts."""
    return any((text := getattr(o, a, None)) and with_subscripts(text) != text for o, a in _typeset_texts(fig))


def subscripted(fig: go.Figure) -> go.Figure:
    """In place: real subscripts (m_i -> m<sub>i</sub>) in the figure's title, subplot titles, axis
    titles, colour-bar titles and legend entries, on screen as in an export."""
    for obj, attribute in _typeset_texts(fig):
        text = getattr(obj, attribute, None)
        if text:
            setattr(obj, attribute, with_subscripts(text))
    return fig


def typeset(fig: go.Figure, width_px: int, font_size: int) -> go.Figure:
    """In place: every title, axis title, subplot title, colour-bar title and legend entry with real
    subscripts; the figure's, the subplots' and the axes' titles wrapped to the length they have at
    `width_px`; the columns of a grid of subplots set apart by what stands between them
    (damcha.views.panel_spacing) and its rows until their titles and tick labels fit."""
    subscripted(fig)
    for trace in fig.data:  # slim colour bars in slightly smaller type: a column has little room beside a panel
        if getattr(trace, "colorbar", None) is not None:
            trace.colorbar.update(thickness=min(trace.colorbar.thickness or 30, 10), tickfont_size=font_size - 2,
                                  title_font_size=font_size - 2)
    space_columns(fig, width_px, font_size, CHARACTER_WIDTH, LINE)
    margin = fig.layout.margin
    # The plot's width between the margins (the template's where the figure sets none), a little less:
    # titles wrap early rather than late.
    plot_width = 0.95 * (width_px - (margin.l if margin.l is not None else 50) - (margin.r if margin.r is not None else 20))
    height = fig.layout.height or 0.85 * width_px
    tops = {round(float((fig.layout[n].domain or (0, 1))[1]), 6) for n in _layout_keys(fig, ("yaxis",))}
    for annotation in fig.layout.annotations:  # a subplot title clears the top tick label, half a line above
        if annotation.yref == "paper" and annotation.y is not None and round(float(annotation.y), 6) in tops \
                and annotation.yanchor == "bottom":
            annotation.yshift = (annotation.yshift or 0) + font_size * LINE / 2
    for annotation in fig.layout.annotations:
        if annotation.text:
            annotation.text = wrapped(annotation.text, plot_width * _subplot_width(fig, annotation),
                                      annotation.font.size or font_size)
    _wrap_axis_titles(fig, plot_width, height, font_size)
    _wrap_category_labels(fig, width_px, font_size)
    title = fig.layout.title.text
    if title:
        title = wrapped(title, plot_width, font_size + 1)
        # Room above the plot for the title's lines and the top row's subplot titles, which stand above it.
        top = [a for a in fig.layout.annotations if a.text and a.yref == "paper" and a.y is not None and a.y >= 0.999]
        below_title = (max((_lines(a.text) for a in top), default=0) + 0.5 * bool(top)) * LINE * font_size
        fig.update_layout(title=dict(text=title, y=1.0, yref="container", yanchor="top", pad=dict(t=font_size + 4)),
                          margin=dict(t=int(font_size + 16 + _lines(title) * LINE * (font_size + 1) + below_title)))
    _fit_square_row(fig, width_px, font_size)
    # After the title's margin is set: rows are spaced in the plot height that is left.
    _space_rows(fig, LINE * font_size)
    fit_square_rows(fig, width_px)
    _thin_listed_ticks(fig, plot_width, fig.layout.height or height, font_size)
    return fig


def _wrap_axis_titles(fig: go.Figure, plot_width: float, height: float, font_size: int) -> None:
    """Axis titles wrapped to their axis's own length (a y axis's title runs along its height)."""
    for name in _layout_keys(fig, ("xaxis", "yaxis")):
        axis = fig.layout[name]
        if axis.title.text:
            d0, d1 = axis.domain or (0.0, 1.0)
            length = (plot_width if name.startswith("x") else 0.8 * height) * (d1 - d0)
            axis.title.text = wrapped(axis.title.text, length, axis.title.font.size or font_size)


def _thin_listed_ticks(fig: go.Figure, plot_width: float, height: float, font_size: int) -> None:
    """Keep every k-th label of an axis with listed ticks, so neighbours do not touch at the length the
    axis has at this width (a square panel, scaleanchor, is as long as its shorter side): a line apart
    on a y axis or under rotated labels, a label's width apart under horizontal ones. The screen's
    thinning was for the screen's size: a journal column is smaller."""
    for name in _layout_keys(fig, ("xaxis", "yaxis")):
        axis = fig.layout[name]
        if axis.tickvals is None or len(axis.tickvals) < 2:
            continue
        d0, d1 = axis.domain or (0.0, 1.0)
        length = (plot_width if name.startswith("x") else height) * (d1 - d0)
        partner = fig.layout[name.replace("y", "x", 1) if name.startswith("y") else name.replace("x", "y", 1)]
        if axis.scaleanchor or getattr(partner, "scaleanchor", None):  # square cells: the shorter side decides
            p0, p1 = partner.domain or (0.0, 1.0)
            length = min(length, (height if name.startswith("x") else plot_width) * (p1 - p0))
        labels = [str(t) for t in (axis.ticktext if axis.ticktext is not None else axis.tickvals)]
        flat = name.startswith("x") and not axis.tickangle  # horizontal labels side by side
        pitch = (max(map(len, labels)) * CHARACTER_WIDTH + 0.5) * font_size if flat else LINE * font_size
        if flat and length // pitch < min(len(labels), 3):  # side by side one or two would be left ("head 1" of
            axis.tickangle, pitch = -90, LINE * font_size  # four): turned upright they stand a line apart
        room = max(1, int(length // pitch))
        step = -(-len(axis.tickvals) // room)
        if step > 1:
            axis.tickvals = list(axis.tickvals)[::step]
            axis.ticktext = list(axis.ticktext)[::step] if axis.ticktext is not None else None


def _lines(text: str | None) -> int:
    return text.count("<br>") + 1 if text else 0


def _wrap_category_labels(fig: go.Figure, width_px: int, font_size: int) -> None:
    """Category names along a y axis (one row per arm or comparison) longer than 40% of the page wrapped
    to that width, the figure growing by the lines they gained (unwrapped they ran off the page)."""
    room = 0.4 * width_px
    for name in _layout_keys(fig, ("yaxis",)) or ["yaxis"]:
        axis, ref = fig.layout[name], "y" + name[5:]
        if axis.tickvals is not None or axis.type not in (None, "-", "category"):
            continue
        names = list(dict.fromkeys(v for t in fig.data if (getattr(t, "yaxis", None) or "y") == ref
                                   and getattr(t, "y", None) is not None for v in trace_items(t.y)
                                   if isinstance(v, str)))
        if not names or max(map(len, names)) * CHARACTER_WIDTH * font_size <= room:
            continue
        labels = [wrapped(n, room, font_size) for n in names]
        axis.update(tickmode="array", tickvals=names, ticktext=labels)
        if fig.layout.height:
            fig.layout.height += 1.5 * sum(_lines(t) - 1 for t in labels) * LINE * font_size  # with air between rows
            # rows are evenly spaced: two neighbours of several lines each need the pitch of their mean, for all
            lines = [_lines(t) for t in labels]
            pitch = max(((a + b) / 2 for a, b in zip(lines, lines[1:])), default=lines[0]) * 1.5 * LINE * font_size
            plot = fig.layout.height - (fig.layout.margin.t or 100) - (fig.layout.margin.b or 80)
            fig.layout.height += max(0.0, len(names) * pitch - plot)


def _fit_square_row(fig: go.Figure, width_px: int, font_size: int) -> None:
    """A single row of square panels (heatmaps with square cells) gets the height its panels need at
    this width, whatever height it had on screen: 100 px squares stood in a 400 px page,
    their titles and a colour bar as long as the page far from them."""
    xs = _layout_keys(fig, ("xaxis",))
    ys = _layout_keys(fig, ("yaxis",))
    if not xs or _layout_keys(fig, ("scene",)):
        return
    rows = {tuple(fig.layout[n].domain or (0.0, 1.0)) for n in ys}
    if len(rows) != 1 or not all(fig.layout[n].scaleanchor for n in ys):
        return
    # Long or rotated tick labels push the margins by as much as plotly finds they need: left as they are.
    labels = [str(t) for n in xs + ys for t in (fig.layout[n].ticktext or fig.layout[n].tickvals or ())]
    if any(fig.layout[n].tickangle for n in xs) or max(map(len, labels), default=0) > 6:
        return
    margin = fig.layout.margin
    plot_width = width_px - (margin.l if margin.l is not None else 50) - (margin.r if margin.r is not None else 20)
    side = max((d1 - d0) for d0, d1 in (fig.layout[n].domain or (0.0, 1.0) for n in xs)) * plot_width
    below = (1 + max((_lines(fig.layout[n].title.text) for n in xs), default=0)) * LINE * font_size + 24
    top = margin.t if margin.t is not None else 50
    fig.update_layout(height=int(top + side + below), margin=dict(b=int(below)))


def _legend_below_px(fig: go.Figure, line_px: float) -> float:
    """About how high a horizontal legend under the plot stands (one entry a line at a column's width)."""
    legend = fig.layout.legend
    if legend.orientation != "h" or legend.y is None or legend.y >= 0 or fig.layout.showlegend is False:
        return 0.0
    entries = sum(1 for t in fig.data if t.showlegend is not False and t.name)
    return entries * line_px


def _space_rows(fig: go.Figure, line_px: float) -> None:
    """Move the rows of a subplot grid apart until what stands between two rows fits (the upper row's
    tick labels and x-axis titles, the lower row's subplot titles, as wrapped at this width), growing
    the figure by as much: rows keep their height, everything placed in paper coordinates moves with
    its row."""
    if not fig.layout.height:
        return
    domains = {n: tuple(fig.layout[n].domain or (0.0, 1.0)) for n in _layout_keys(fig, ("yaxis",))}
    rows = sorted({(round(d0, 6), round(d1, 6)) for d0, d1 in domains.values()}, key=lambda d: -d[1])
    if len(rows) < 2:
        return
    margin = fig.layout.margin
    plot = fig.layout.height - (margin.t if margin.t is not None else 50) - (margin.b if margin.b is not None else 45)
    plot -= _legend_below_px(fig, line_px)  # a legend under the plot pushes the bottom margin
    extras = []
    for upper, lower in zip(rows, rows[1:]):
        below = max((_lines(fig.layout[n].title.text) for n in _layout_keys(fig, ("xaxis",))
                     if round(domains.get("y" + n[1:], (None, None))[1] or -1, 6) == upper[1]), default=0)
        above = max((_lines(a.text) for a in fig.layout.annotations
                     if a.yref == "paper" and a.y is not None and abs(a.y - lower[1]) < 1e-3), default=0)
        # tick labels, the x titles (standing off them), the subplot titles lifted half a line, some air
        needed = (2 + below + above + 0.5) * line_px + 30
        extras.append(max(0.0, needed - (upper[0] - lower[1]) * plot))
    if not any(extras):
        return
    grown = plot + sum(extras)
    edges = [(1 - lower[1]) * plot for lower in rows[1:]]  # from the top, the upper edge of each lower row

    def moved(y: float) -> float:
        u = (1 - y) * plot
        return 1 - (u + sum(e for edge, e in zip(edges, extras) if edge <= u + 0.5)) / grown

    move_rows(fig, moved)
    fig.layout.height = fig.layout.height + sum(extras)


def plain_title(fig: go.Figure) -> str:
    """The figure's title without markup, subscripts written back with their underscore: what a PDF
    names it."""
    text = re.sub(r"<sub>(.*?)</sub>", r"_\1", fig.layout.title.text or "")
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", text)).strip()


def with_pdf_metadata(pdf: bytes, title: str, subject: str, creator: str) -> bytes:
    """The PDF with its document information naming the figure (kaleido's Chromium writes its own
    page title there)."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf)))
    writer.add_metadata({"/Title": title, "/Subject": subject, "/Creator": creator, "/Producer": creator})
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()
