"""An input's attention as text, in the manner of BertViz's head view and CircuitsVis' attention
patterns: the tokens in reading order; point at (or click) one and every token shows, per head in
the head's colour, how much attention goes from it to that token (or, reversed, from that token to
it); a head's per-query scalars (DAMCHA's ‖m_i(c_t)‖) beside it.

One standalone HTML file: its script and data are inline, it loads nothing, so it works offline,
in the app (a Streamlit component) and exported alike.
"""

from __future__ import annotations

import base64
import html
import json

import numpy as np

from damcha.analysis.inspection import InspectionRecord
from damcha.model.mechanisms import StructureKind

# ColorBrewer Dark2 then Set1: distinct on white, one per head (cycled past 16 heads).
TOKEN_VIEW_TITLE = "Tokens with the attention each head gives them"  # the frame's accessible name

HEAD_COLOURS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666",
                "#e41a1c", "#377eb8", "#4daf4a", "#984ea3", "#ff7f00", "#a65628", "#f781bf", "#999999")


def per_query_head_norms(record: InspectionRecord) -> dict[str, np.ndarray]:
    """{title: (layers, T, H)} Frobenius norm of each per-head form at each query position, for every
    per-head structure the mechanism gives per position (DAMCHA's m_i(c_t)); NaN where not taken."""
    out = {}
    T = len(record.tokens)
    for s in record.structures:
        if s.kind is not StructureKind.PER_HEAD_FORMS or "position" not in s.index_axes:
            continue
        v = s.values if "layer" in s.index_axes else s.values[None]  # (L, P, H, a, b)
        norms = np.sqrt((np.asarray(v, dtype=float) ** 2).sum(axis=(-1, -2)))  # (L, P, H)
        full = np.full((norms.shape[0], T, norms.shape[2]), np.nan)
        if record.causal:
            full[:, record.positions] = norms
        else:  # one metric for the whole input: the same at every query
            full[:] = norms[:, :1]
        out[f"‖{s.title}‖ per head"] = full
    return out


QUANT = 32767


def token_view_data(record: InspectionRecord) -> dict:
    """What the view's script reads: labels, the kept layers' attention as little-endian int16 of
    weight / scale * 32767 (base64, layer-major), where scale = max(1, max |weight|): mechanisms that
    mix maps after the softmax (THA, differential attention) have weights outside [0, 1]; head
    colours; the per-query head norms."""
    scale = max(1.0, float(np.abs(record.attention).max(initial=0.0)))
    attention = np.rint(record.attention / scale * QUANT).astype("<i2")  # (L_kept, H, T, T)
    missing = np.array(None, dtype=object)  # (JSON null where a norm is undefined)
    norms = {k: np.where(np.isnan(v), missing, np.round(v, 4)).tolist()
             for k, v in per_query_head_norms(record).items()}
    return {
        "labels": list(record.token_labels),
        "layers": [i + 1 for i in record.attention_layers],
        "heads": record.n_head,
        "T": len(record.tokens),
        "causal": record.causal,
        "attention": base64.b64encode(attention.tobytes()).decode("ascii"),
        "scale": scale / QUANT,
        "signed": bool((record.attention < 0).any()),
        "colours": [HEAD_COLOURS[h % len(HEAD_COLOURS)] for h in range(record.n_head)],
        "norms": norms,
    }


def token_view_html(record: InspectionRecord, title: str = "") -> str:
    """The standalone page (see the module docstring)."""
    if not record.attention_layers:
        raise ValueError("the record kept no attention maps; inspect with attention_layers")
    data = json.dumps(token_view_data(record), separators=(",", ":"))
    return (_PAGE.replace("__TITLE__", html.escape(title or f"Attention of {record.variant} as text"))
            .replace("__DATA__", data.replace("</", "<\\/")))


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:12px;color:#222}
h1{font-size:16px;margin:0 0 8px}
#controls{display:flex;flex-wrap:wrap;gap:12px;align-items:center;font-size:13px;margin-bottom:8px}
.head{display:inline-flex;align-items:center;gap:3px;cursor:pointer;user-select:none}
.head input{margin:0}.sw{width:12px;height:12px;border-radius:2px;display:inline-block}
#text{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:15px;border:1px solid #ddd;
padding:8px;border-radius:4px}
.tok{display:inline-block;position:relative;padding:0 1px;cursor:pointer;border-radius:2px;min-width:.6em;text-align:center}
.tok .bars{position:absolute;left:0;right:0;top:100%;display:flex;flex-direction:column}
.tok .bars i{height:3px}
.tok.q{outline:2px solid #222}.tok.locked{outline:2px dashed #222}
.tok .ws{color:#bbb}
#info{font-size:13px;margin-top:10px;min-height:3em}
#info table{border-collapse:collapse}#info td{padding:1px 8px 1px 0}
.nbar{display:inline-block;height:10px;vertical-align:middle}
</style></head><body>
<h1>__TITLE__</h1>
<div id="controls">
<label>Layer <select id="layer"></select></label>
<label>Direction <select id="dir"><option value="q">from the pointed token (as query) to each key</option>
<option value="k">to the pointed token (as key) from each query</option></select></label>
<span id="heads"></span>
<button id="all" type="button">all heads</button><button id="none" type="button">no heads</button>
</div>
<div id="text" tabindex="0"></div>
<div id="info">Point at a token (or click to keep it; arrow keys move the kept one). Each head's stripe
under a token is as opaque as its attention weight; the token is shaded in the colour of its strongest
head.<span id="signed"></span></div>
<script>
const D = __DATA__;
const raw = atob(D.attention), bytes = new Uint8Array(raw.length);
for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
const A = new DataView(bytes.buffer), T = D.T, H = D.heads, wmax = D.scale * 32767;
const w = (li, h, q, k) => A.getInt16(2 * (((li * H + h) * T + q) * T + k), true) * D.scale;
const layerSel = document.getElementById("layer"), dirSel = document.getElementById("dir");
D.layers.forEach((l, i) => layerSel.add(new Option("layer " + l, i)));
const on = Array(H).fill(true), heads = document.getElementById("heads");
D.colours.forEach((c, h) => {
  const lab = document.createElement("label"); lab.className = "head";
  lab.innerHTML = `<input type="checkbox" checked data-h="${h}"><span class="sw" style="background:${c}"></span>head ${h + 1}`;
  heads.appendChild(lab);
});
heads.addEventListener("change", e => { on[+e.target.dataset.h] = e.target.checked; draw(); });
const text = document.getElementById("text"), spans = [];
text.style.lineHeight = `calc(1.5em + ${3 * H + 4}px)`;
const rgba = (hex, a) => `rgba(${parseInt(hex.slice(1, 3), 16)},${parseInt(hex.slice(3, 5), 16)},${parseInt(hex.slice(5, 7), 16)},${a})`;
D.labels.forEach((lab, i) => {
  const s = document.createElement("span"); s.className = "tok"; s.dataset.i = i; s.tabIndex = -1;
  const ws = lab === "\\u2423" || lab === "\\u23ce";
  const ch = document.createElement("span"); ch.textContent = lab; if (ws) ch.className = "ws";
  s.appendChild(ch);
  const bars = document.createElement("span"); bars.className = "bars";
  for (let h = 0; h < H; h++) { const b = document.createElement("i"); b.style.background = D.colours[h]; bars.appendChild(b); }
  s.appendChild(bars); s.title = `position ${i}: ${lab}`;
  text.appendChild(s); spans.push(s);
  if (lab === "\\u23ce") text.appendChild(document.createElement("br"));
});
let pointed = null, locked = null;
function draw() {
  const li = +layerSel.value, p = locked ?? pointed, asQuery = dirSel.value === "q";
  spans.forEach((s, i) => {
    s.classList.toggle("q", i === p); s.classList.toggle("locked", i === locked);
    const bars = s.lastChild.children;
    let best = 0, bestHead = -1;
    for (let h = 0; h < H; h++) {
      const v = p === null || !on[h] ? 0 : (asQuery ? w(li, h, p, i) : w(li, h, i, p));
      bars[h].style.opacity = Math.abs(v) / wmax; bars[h].dataset.w = v.toFixed(3);
      bars[h].style.background = v < 0 ? "#000" : D.colours[h];
      if (v > best) { best = v; bestHead = h; }
    }
    s.style.background = bestHead < 0 ? "" : rgba(D.colours[bestHead], (0.8 * best / wmax).toFixed(3));  
  });
  info(li, p, asQuery);
}
function info(li, p, asQuery) {
  const box = document.getElementById("info");
  if (p === null) return;
  let rows = "";
  for (let h = 0; h < H; h++) {
    if (!on[h]) continue;
    const ws = [...Array(T).keys()].map(j => [j, asQuery ? w(li, h, p, j) : w(li, h, j, p)]).sort((a, b) => b[1] - a[1]).slice(0, 3);
    rows += `<tr><td><span class="sw" style="background:${D.colours[h]}"></span> head ${h + 1}</td><td>` +
      ws.map(([j, v]) => `${esc(D.labels[j])}@${j} ${v.toFixed(2)}`).join(", ") + "</td></tr>";
  }
  let norms = "";
  for (const [name, vals] of Object.entries(D.norms)) {
    const layer = vals[Math.min(li, vals.length - 1)][p];
    if (!layer || layer.some(v => v === null)) continue;
    const top = Math.max(...layer, 1e-12);
    norms += `<div>${esc(name)} at query ${p}: ` + layer.map((v, h) =>
      `<span title="head ${h + 1}: ${v}"><span class="nbar" style="width:${Math.round(60 * v / top)}px;background:${D.colours[h]}"></span> ${v.toFixed(3)}</span>`
    ).join(" ") + "</div>";
  }
  const what = asQuery ? "attends to" : "is attended from";
  box.innerHTML = `<b>${esc(D.labels[p])}</b> (position ${p}) ${what}, strongest per head:<table>${rows}</table>${norms}`;
}
const esc = s => s.replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
text.addEventListener("mouseover", e => { const t = e.target.closest(".tok"); if (t) { pointed = +t.dataset.i; draw(); } });
text.addEventListener("click", e => { const t = e.target.closest(".tok"); if (!t) return;
  const i = +t.dataset.i; locked = locked === i ? null : i; draw(); });
text.addEventListener("keydown", e => {
  const cur = locked ?? pointed ?? -1;
  if (e.key === "ArrowRight") locked = Math.min(T - 1, cur + 1); else if (e.key === "ArrowLeft") locked = Math.max(0, cur - 1);
  else return;
  e.preventDefault(); draw();
});
if (D.signed) document.getElementById("signed").textContent = ` This mechanism mixes maps after the softmax:
weights reach ${wmax.toFixed(2)} and below 0; a black stripe is a negative weight, and opacity is |weight| / ${wmax.toFixed(2)}.`;
layerSel.addEventListener("change", draw); dirSel.addEventListener("change", draw);
document.getElementById("all").onclick = () => { on.fill(true); heads.querySelectorAll("input").forEach(x => x.checked = true); draw(); };
document.getElementById("none").onclick = () => { on.fill(false); heads.querySelectorAll("input").forEach(x => x.checked = false); draw(); };
</script></body></html>
"""
