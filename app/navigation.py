"""The app's pages, in menu order: one line each. A page is a file in pages/ and a line here (see
docs/extending.md, "Adding a page"); tests walk this list and the folder, and they must agree."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PAGES_DIR = Path(__file__).resolve().parent.parent / "pages"


@dataclass(frozen=True)
class PageEntry:
    """file: the page's script (a name in pages/, or a path). url_path: '' for the default page."""

    file: str | Path
    title: str
    icon: str
    url_path: str = ""

    @property
    def path(self) -> Path:
        return PAGES_DIR / self.file if isinstance(self.file, str) else Path(self.file)


PAGES: list[PageEntry] = [
    PageEntry("home.py", "Home", ":material/home:"),
    PageEntry("inspector.py", "Inspector", ":material/search:", "inspector"),
    PageEntry("compare.py", "Compare mechanisms", ":material/compare:", "compare"),
    PageEntry("table.py", "Data table", ":material/table_rows:", "table"),
    PageEntry("dynamics.py", "Training dynamics", ":material/timeline:", "dynamics"),
    PageEntry("gradients.py", "Gradient contributions", ":material/gradient:", "gradients"),
    PageEntry("ablation.py", "Metric ablations", ":material/tune:", "ablation"),
    PageEntry("evidence.py", "Evidence", ":material/fact_check:", "evidence"),
    PageEntry("interventions.py", "Interventions", ":material/science:", "interventions"),
]
