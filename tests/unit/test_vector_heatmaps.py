"""Vector heatmaps for SVG and PDF export: one rectangle per cell in the colour the heatmap gives
that value (checked at the scale's ends and centre), the axes' categories, the colour bar and the
written numbers kept; too many cells stay an image; the exported SVG holds no raster image."""

import xml.etree.ElementTree as ET

import numpy as np
import plotly.graph_objects as go
import pytest

from damcha.views import figures
from damcha.views.export import ExportSettings, figure_bytes, paper_style
from damcha.views.vector_heatmaps import MAX_VECTOR_CELLS, vector_heatmaps
from tests.support.browser import require_static_export

RDBU_ENDS = ("rgb(5,48,97)", "rgb(247,247,247)", "rgb(103,0,31)")  # RdBu_r at 0, 0.5 and 1


def signed_figure() -> tuple[go.Figure, np.ndarray]:
    values = np.array([[-2.0, 0.0, 2.0], [1.0, np.nan, -0.5]])  # (2, 3): the scale's ends, its centre, a gap
    style = figures.MatrixStyle("layer", "head", ("layer 1", "layer 2"), ("head 1", "head 2", "head 3"), "signed",
                                "Δ loss (bits)")
    return figures.head_by_head_figure(values, "Signed values", style=style), values


def test_each_cell_is_a_rectangle_in_the_heatmaps_colour():
    fig, values = signed_figure()
    vector = vector_heatmaps(fig)
    cells = [s for s in vector.layout.shapes if s.type == "rect" and s.layer == "below"]
    assert len(cells) == int(np.isfinite(values).sum())  # the missing value is left blank
    at = {(round((s.x0 + s.x1) / 2), round((s.y0 + s.y1) / 2)): s for s in cells}
    assert at[(0, 0)].fillcolor == RDBU_ENDS[0] and at[(1, 0)].fillcolor == RDBU_ENDS[1]
    assert at[(2, 0)].fillcolor == RDBU_ENDS[2] and (1, 1) not in at
    assert all(s.x1 - s.x0 == pytest.approx(1.0) and s.y1 - s.y0 == pytest.approx(1.0) for s in cells)
    assert not [t for t in vector.data if t.type == "heatmap"]
    carrier = next(t for t in vector.data if t.mode == "markers")
    assert set(carrier.x) == {"head 1", "head 2", "head 3"} and set(carrier.y) == {"layer 1", "layer 2"}
    assert carrier.marker.colorbar.title.text == "Δ loss (bits)" and carrier.marker.colorbar.exponentformat == "power"
    assert (carrier.marker.cmin, carrier.marker.cmax) == (-2.0, 2.0)
    written = next(t for t in vector.data if t.mode == "text")
    assert list(written.text) == ["-2", "0", "2", "1", "", "-0.5"]
    assert written.textfont.color[0] == "white" and written.textfont.color[1] == "black"  # on dark blue, on white


def test_the_figures_own_overlays_stay_above_the_cells():
    fig = figures.metric_heatmap_figure(np.random.default_rng(0).normal(size=(8, 8)), 4, "M(x)")
    vector = vector_heatmaps(paper_style(fig))  # as exported: the paper template's copy, arrays encoded
    grid = [s for s in vector.layout.shapes if s.layer != "below"]
    assert len(grid) == len(fig.layout.shapes) > 0
    assert len(vector.layout.shapes) == 64 + len(grid)


def test_too_many_cells_stay_an_image():
    fig = figures.metric_heatmap_figure(np.zeros((200, 200)), 4, "large")
    assert 200 * 200 > MAX_VECTOR_CELLS and vector_heatmaps(fig) is fig


def test_the_exported_svg_draws_cells_not_an_image():
    require_static_export()
    fig, values = signed_figure()
    raster = ET.fromstring(figure_bytes(fig, "svg"))
    vector = ET.fromstring(figure_bytes(fig, "svg", ExportSettings(vector_heatmaps=True)))

    def count(root, tag):
        return sum(1 for e in root.iter() if e.tag.endswith(tag))

    assert count(raster, "image") == 1 and count(vector, "image") == 0
    assert count(vector, "path") >= int(np.isfinite(values).sum())
    assert "Signed values" in " ".join(vector.itertext())
