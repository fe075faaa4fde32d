"""Where a figure's texts and plot areas land when plotly.js draws it in Chromium, as an export draws it:
every title, subplot title, axis title, tick label, colour-bar title and tick and legend entry as a box
with its kind, and every 2-D plot area. Many figures are drawn in one page (plotly.js loaded once), so
a test can hold every named figure to the same layout rules at both column widths."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import plotly
import plotly.graph_objects as go
import plotly.io as pio

from tests.support.browser import CHROMIUM_ARGS, require_chromium

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"

# Kinds by the classes plotly.js gives them: axis titles and ticks carry their axis' name (xtitle, y3title,
# x2tick), colour bars theirs (ycb<id>tick); subplot titles are annotations.
_MEASURE = """async ([figures]) => {
    const out = [];
    // An annotation anchored in the data or inside a plot area labels what is drawn there (a mark, a
    // count); the others (subplot titles) stand outside every plot area.
    const inside = (div, t) => {
        const g = t.closest('.annotation');
        const a = g && div._fullLayout.annotations[Number(g.getAttribute('data-index'))];
        if (!a) return false;
        if (a.xref !== 'paper' || a.yref !== 'paper') return true;
        const s = div._fullLayout._size, x = s.l + a.x * s.w, y = s.t + (1 - a.y) * s.h;
        return Object.values(div._fullLayout._plots || {}).some(p =>
            x > p.xaxis._offset + 2 && x < p.xaxis._offset + p.xaxis._length - 2 &&
            y > p.yaxis._offset + 2 && y < p.yaxis._offset + p.yaxis._length - 2);
    };
    const kindOf = (t) => {
        if (t.closest('.legendtext') || t.classList.contains('legendtext')) return 'legend';
        if (t.closest('.cbtitle')) return 'colour bar';
        const group = t.parentElement ? t.parentElement.getAttribute('class') || '' : '';
        if (/^ycb.*tick$|^xcb.*tick$/.test(group)) return 'colour bar tick';
        if (/^[xy][0-9]*tick$/.test(group)) return 'tick';
        const own = t.getAttribute('class') || '';
        if (/^[xy][0-9]*title$/.test(own) || own === 'gtitle' || own === 'annotation-text') return 'title';
        return null;
    };
    for (const f of figures) {
        const div = document.createElement('div');
        document.body.innerHTML = '';
        document.body.appendChild(div);
        try {
            await Plotly.newPlot(div, f.data, f.layout, {staticPlot: true});
        } catch (e) {
            out.push({error: String(e)});
            continue;
        }
        const svg = div.querySelector('svg.main-svg').getBoundingClientRect();
        const boxes = [];
        for (const t of div.querySelectorAll('svg text')) {
            let kind = kindOf(t);
            if (kind === 'title' && t.classList.contains('annotation-text') && inside(div, t)) kind = 'label';
            if (!kind || !t.textContent.trim()) continue;
            // a rotated tick label's box is far larger than its glyphs: rotated tick labels are left out
            if (kind === 'tick' && (t.getAttribute('transform') || '').includes('rotate')) continue;
            const r = t.getBoundingClientRect();
            if (r.width < 0.5 || r.height < 0.5) continue;
            boxes.push({kind, text: t.textContent, x0: r.left - svg.left, x1: r.right - svg.left,
                        y0: r.top - svg.top, y1: r.bottom - svg.top});
        }
        const areas = Object.values(div._fullLayout._plots || {}).map(p => ({
            name: p.id, x0: p.xaxis._offset, x1: p.xaxis._offset + p.xaxis._length,
            y0: p.yaxis._offset, y1: p.yaxis._offset + p.yaxis._length}));
        out.push({boxes, areas, width: svg.width, height: svg.height});
    }
    return out;
}"""


def measured(figures: Sequence[go.Figure], width: int, heights: Sequence[int] | None = None) -> list[dict]:
    """Each figure drawn `width` px wide (its own height, or heights[i], or 0.85 of the width, as an export
    does): {boxes, areas, width, height}, or {error} where plotly.js could not draw it."""
    from playwright.sync_api import sync_playwright

    specs = []
    for i, fig in enumerate(figures):
        spec = json.loads(pio.to_json(fig))
        height = (heights[i] if heights else None) or fig.layout.height or int(0.85 * width)
        spec["layout"].update(width=width, height=height, autosize=False)
        specs.append(spec)
    exe = require_chromium()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": width + 40, "height": 1000})
        page.set_content("<html><body style='margin:0'></body></html>")
        page.add_script_tag(path=str(PLOTLY_JS))
        results = page.evaluate(_MEASURE, [specs])
        browser.close()
    return results


def _overlap(a: dict, b: dict, slack: float = 1.0) -> bool:
    return min(a["x1"], b["x1"]) - max(a["x0"], b["x0"]) > slack and min(a["y1"], b["y1"]) - max(a["y0"], b["y0"]) > slack


def clashes(drawn: dict) -> list[str]:
    """What a reader could not read: two texts on each other, a text on a plot area (legend entries and
    labels placed inside one aside), or a text out of the page."""
    boxes, out = drawn["boxes"], []
    for i, a in enumerate(boxes):
        out += [f"{a['kind']} {a['text']!r} on {b['kind']} {b['text']!r}" for b in boxes[i + 1:] if _overlap(a, b)]
        if a["kind"] not in ("legend", "label"):
            out += [f"{a['kind']} {a['text']!r} on plot area {p['name']}" for p in drawn["areas"] if _overlap(a, p, 2.0)]
        if a["x0"] < -1 or a["x1"] > drawn["width"] + 1 or a["y0"] < -1 or a["y1"] > drawn["height"] + 1:
            out.append(f"{a['kind']} {a['text']!r} out of the page")
    return out
