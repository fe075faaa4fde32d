"""The example notebook runs top to bottom (headless kernel), so it cannot rot."""

from pathlib import Path

import nbformat
from nbclient import NotebookClient

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_example_notebook_executes_top_to_bottom():
    nb = nbformat.read(EXAMPLES / "damcha_notebook.ipynb", as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert "InspectionRecord of damcha" in text and "decomposition.html" in text
    assert any("application/vnd.plotly.v1+json" in o.get("data", {}) for o in outputs)  # figures render inline
