"""Whether a page shows every loss in its run's unit: read from what an AppTest rendered."""

import json
import re

LOSS = re.compile(r"\b(loss|nll|NLL)\b")


def shown_texts(at) -> list[str]:
    """What names a shown number: every figure's axis and colour-bar titles, every metric's label,
    every table's column names."""
    texts = []
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        for key, axis in spec.get("layout", {}).items():
            if key.startswith(("xaxis", "yaxis")) and isinstance(axis, dict):
                texts.append(str(axis.get("title", {}).get("text", "")))
        texts += [str(t.get("colorbar", {}).get("title", {}).get("text", "")) for t in spec.get("data", [])]
    texts += [m.label for m in at.metric]
    for df in at.dataframe:  # a column of text cells names its unit in each cell (runs of several units)
        for column in df.value.columns:
            shown = [v for v in df.value[column] if v is not None and v == v and v != "—"]  # "—": no number
            cells = [v for v in shown if isinstance(v, str)]
            texts.append(f"{column}: {cells[0]}" if cells and len(cells) == len(shown) else str(column))
    return [t for t in texts if t]


UNITS = ("bits per ", "squared error")  # what the app writes a loss in (damcha.views.display_units)


def losses_without_unit(texts) -> list[str]:
    """The texts that name a loss without a unit, or that are in nats. (A page about one run names
    its unit; Home's table names each run's in its cells.)"""
    return [t for t in texts if (LOSS.search(t) and not any(u in t for u in UNITS)) or "nats" in t]
