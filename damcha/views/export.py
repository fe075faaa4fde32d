"""Figures and their data to files: PNG/SVG/PDF (kaleido + system Chromium), offline HTML, CSV/NPZ,
each with a provenance JSON; ZIP bundles. Used by the app and by `python -m damcha figures`."""

from __future__ import annotations

import atexit
import datetime as _dt
import io
import json
import os
import shutil
import threading
import warnings
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from damcha import __version__
from damcha.inputs.model_inputs import tokens_sha256
from damcha.runs.checkpoints import atomic_path
from damcha.runs.files import file_sha256
from damcha.views.plotly_arrays import figure_copy, trace_array
from damcha.views.render_folders import render_folder
from damcha.views.typesetting import COLUMN_WIDTHS, plain_title, typeset, with_pdf_metadata
from damcha.views.vector_heatmaps import vector_heatmaps

STATIC_FORMATS = ("png", "svg", "pdf")
ALL_FORMATS = (*STATIC_FORMATS, "html", "csv", "npz")
PAPER_FONT = "Arial, Helvetica, sans-serif"


@dataclass(frozen=True)
class ExportSettings:
    """Size of static images in CSS pixels (PNG is rendered at width*scale x height*scale; PDF and
    SVG pages are width*0.75 pt wide). 460 px fits a single journal column (3.5 in) with 14 px text
    printing at about 7.5 pt; 940 px fits a double column at the same text size."""

    width: int = 460
    height: int | None = None  # None: the figure's own height (multi-panel figures), else 0.85 x width
    scale: float = 2.0
    paper_style: bool = True
    font_size: int = 14
    vector_heatmaps: bool = False  # SVG/PDF heatmaps as vector cells (damcha.views.vector_heatmaps)

    @classmethod
    def column(cls, preset: str, **others) -> ExportSettings:
        """The settings of a journal column preset ("single column", "double column")."""
        if preset not in COLUMN_WIDTHS:
            raise ValueError(f"unknown column preset {preset!r}; expected one of {', '.join(COLUMN_WIDTHS)}")
        return cls(width=COLUMN_WIDTHS[preset], **others)


def chromium_path() -> str | None:
    """The Chromium kaleido will drive: $BROWSER_PATH, else one on PATH."""
    env = os.environ.get("BROWSER_PATH")
    if env and Path(env).exists():
        return env
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def static_export_status() -> tuple[bool, str]:
    """(available, message). Without Chromium, PNG/SVG/PDF are off; HTML and data still work."""
    path = chromium_path()
    if path:
        return True, f"static export through kaleido with {path}"
    return False, ("PNG, SVG and PDF need a Chromium browser for kaleido: install Debian's package "
                   "(`apt-get install chromium`) or set BROWSER_PATH; HTML and data export work without it.")


_server_lock = threading.Lock()
_server_started = False
# kaleido's sync server answers through one shared return queue: two renders in flight at once (two download
# clicks, two visitors) can each take the other's bytes, a PNG named .svg. One render at a time per process.
_render_lock = threading.Lock()


def _ensure_server() -> None:
    """Start kaleido's persistent server once per process: the first export pays for starting
    Chromium (about 2 s), later ones reuse it (about 0.2 s)."""
    global _server_started
    with _server_lock:
        if not _server_started:
            import kaleido

            folder = render_folder()  # Chromium's profile and the page in a folder a killed process's successor clears
            if folder is not None:
                page = folder / "index.html"
                page.write_text(kaleido.PageGenerator().generate_index(), encoding="utf-8")
                kaleido.start_sync_server(silence_warnings=True, tmp_dir=str(folder), page_generator=page)
                atexit.register(shutil.rmtree, folder, ignore_errors=True)  # (runs after Chromium is closed)
            else:
                kaleido.start_sync_server(silence_warnings=True)
            atexit.register(kaleido.stop_sync_server, silence_warnings=True)  # close Chromium before exit
            _server_started = True


def paper_template(font_size: int = 14) -> str:
    """The name of a registered plotly template in paper style at `font_size`: plotly_white with a
    white background, one sans-serif family at sizes that survive scaling to a single column, thin
    black axes without grid lines (colour scales stay as each figure sets them)."""
    name = f"damcha_paper_{font_size}"
    if name not in pio.templates:
        template = go.layout.Template(pio.templates["plotly_white"])
        template.layout.update(
            paper_bgcolor="white", plot_bgcolor="white", font=dict(family=PAPER_FONT, size=font_size, color="black"),
            title=dict(font=dict(size=font_size + 1)), margin=dict(l=50, r=20, t=50, b=45),
            # Tick labels stand off their axes, so the two axes' labels at a corner (0 and 0) do not touch.
            xaxis=dict(showgrid=False, zeroline=False, title=dict(font=dict(size=font_size)), ticklabelstandoff=2),
            yaxis=dict(showgrid=False, zeroline=False, title=dict(font=dict(size=font_size)), ticklabelstandoff=4),
        )
        pio.templates[name] = template
    return name


def paper_style(fig: go.Figure, settings: ExportSettings | None = None) -> go.Figure:
    """A copy of the figure under the paper template (see paper_template), typeset for the width it is
    exported at (titles wrapped, real subscripts: damcha.views.typesetting)."""
    settings = settings or ExportSettings()
    base = settings.font_size
    out = figure_copy(fig)  # a copy whose arrays stay arrays (to_dict encodes them as base64)
    # A figure's own margins and subplot axes were set for the screen: the template's take over.
    out.update_layout(template=paper_template(base), margin=None, font=None)
    out.update_annotations(font=dict(family=PAPER_FONT, size=base))  # subplot titles are annotations
    out.update_xaxes(showgrid=False, zeroline=False, title_font=dict(size=base))
    out.update_yaxes(showgrid=False, zeroline=False, title_font=dict(size=base))
    return typeset(out, settings.width, base)


def figure_bytes(fig: go.Figure, fmt: str, settings: ExportSettings | None = None, name: str = "") -> bytes:
    """The figure as PNG/SVG/PDF (kaleido) or a standalone offline HTML file (plotly.js embedded); a
    PDF's document information names the figure (its title, and `name`, the file's stem)."""
    settings = settings or ExportSettings()
    # Everything below works on this process's own copy: the figure may be shared (see figure_copy).
    styled = paper_style(fig, settings) if settings.paper_style else figure_copy(fig)
    if fmt == "html":
        return styled.to_html(include_plotlyjs=True, full_html=True).encode("utf-8")
    if fmt not in STATIC_FORMATS:
        raise ValueError(f"unknown figure format {fmt!r}; expected one of {STATIC_FORMATS + ('html',)}")
    ok, message = static_export_status()
    if not ok:
        raise RuntimeError(message)

    if settings.vector_heatmaps and fmt in ("svg", "pdf"):
        styled = vector_heatmaps(styled)
    _ensure_server()
    with _render_lock, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "kopts ignored when using a server"
        height = settings.height or styled.layout.height or int(0.85 * settings.width)
        raw = pio.to_image(styled, format=fmt, width=settings.width, height=height,
                           scale=settings.scale if fmt == "png" else 1)
    if fmt == "pdf":
        raw = with_pdf_metadata(raw, plain_title(styled) or name or "DAMCHA Lab figure", name,
                                f"damcha {__version__}")
    return raw


def _numbers(values: np.ndarray) -> np.ndarray:
    """Values as floats; category labels (a bar chart's names, on either axis) as their positions."""
    try:
        return values.astype(float)
    except (TypeError, ValueError):
        return np.arange(len(values), dtype=float)


def figure_data(fig: go.Figure) -> dict[str, np.ndarray]:
    """The arrays a figure shows, by trace: z of heatmaps, contours and surfaces; x and y of
    lines and bars. Animation frames are included as frame_<name>_<trace>. Arrays in plotly's typed-array
    form (a figure from Streamlit's cache, from JSON) are decoded."""
    out: dict[str, np.ndarray] = {}

    def take(traces, prefix):
        for k, t in enumerate(traces):
            name = f"{prefix}{k}_{(t.name or t.type).replace(' ', '_')}"
            z, y = trace_array(getattr(t, "z", None)), trace_array(getattr(t, "y", None))
            if z is not None:
                out[name] = np.asarray(z, dtype=float)
            elif y is not None and t.type in ("scatter", "bar"):
                x = trace_array(t.x)
                x = np.arange(len(y)) if x is None else np.asarray(x)
                out[f"{name}_x"], out[f"{name}_y"] = _numbers(x), _numbers(np.asarray(y))

    take(fig.data, "trace")
    for frame in fig.frames or ():
        take(frame.data, f"frame_{frame.name}_")
    return out


def data_csv(data: dict[str, np.ndarray]) -> bytes:
    """Long-format CSV: array,row,col,value (one line per entry), exact to float64 repr."""
    buf = io.StringIO()
    buf.write("array,row,col,value\n")
    for name, arr in data.items():
        a = np.atleast_2d(np.asarray(arr, dtype=float))
        if a.ndim > 2:
            a = a.reshape(a.shape[0], -1)
        for (i, j), v in np.ndenumerate(a):
            buf.write(f"{name},{i},{j},{float(v)!r}\n")
    return buf.getvalue().encode()


def read_data_csv(raw: bytes) -> dict[str, np.ndarray]:
    """Inverse of data_csv (2-D arrays)."""
    cells: dict[str, dict[tuple[int, int], float]] = {}
    for line in raw.decode().splitlines()[1:]:
        name, row, col, value = line.rsplit(",", 3)
        cells.setdefault(name, {})[(int(row), int(col))] = float(value)
    out: dict[str, np.ndarray] = {}
    for name, c in cells.items():
        a = np.full((1 + max(i for i, _ in c), 1 + max(j for _, j in c)), np.nan)
        for (i, j), v in c.items():
            a[i, j] = v
        out[name] = a
    return out


def data_npz(data: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **{k: np.asarray(v) for k, v in data.items()})  # type: ignore[arg-type]  # (numpy's stub
    # types **kwds against allow_pickle)
    return buf.getvalue()


COUNTED_FROM_ONE = ("layer", "attn_layer", "head")  # figure parameters people count from 1, as the app shows them


def numbered_from_one(params: dict) -> dict:
    """Figure parameters as a provenance file writes them: layers and heads counted from 1 (as the
    app and the figures name them), marked so that `library_params` can read them back."""
    out = {k: v + 1 if k in COUNTED_FROM_ONE and isinstance(v, int) else v for k, v in params.items()}
    if any(k in COUNTED_FROM_ONE for k in params):
        out["counted_from"] = 1
    return out


def library_params(params: dict) -> dict:
    """The inverse of numbered_from_one (files written before the marker count from 0 and are read as they are)."""
    params = dict(params)
    if params.pop("counted_from", 0) == 1:
        params = {k: v - 1 if k in COUNTED_FROM_ONE and isinstance(v, int) else v for k, v in params.items()}
    return params


def run_name_in(path, root) -> str:
    """A run's path relative to the checkpoint root it was opened from (its folder name when outside)."""
    if root is None:
        return str(path)
    try:
        return str(Path(path).resolve().relative_to(Path(root).resolve()))
    except (ValueError, OSError, RuntimeError):
        return Path(path).name


@dataclass(frozen=True)
class Provenance:
    """What a figure shows and how to rebuild it: the run and epoch (with the snapshot's SHA-256),
    the input (its tokens when small enough, always their hash), and the figure's parameters.

    regenerable: the figure is a named figure (of a record or model, across epochs, of several runs,
    or of the stored evidence), so `damcha figures --from-provenance` rebuilds it. Written to JSON with the export settings, version and date."""

    figure: str
    run: str | None = None
    epoch: int | None = None
    checkpoint_sha256: str | None = None
    input_source: str = ""
    input_sha256: str | None = None
    input_tokens: list | None = None
    input_targets: list | int | None = None
    params: dict = field(default_factory=dict)
    regenerable: bool = False

    @classmethod
    def of(cls, figure: str, run=None, epoch: int | None = None, tokens=None, targets=None, input_source: str = "",
           params: dict | None = None, regenerable: bool = False, root=None) -> Provenance:
        """The provenance of a figure of `run` (a damcha.runs.checkpoints.Run) at `epoch` on an input.
        root: the checkpoint folder the run was opened from; the run is then named relative to it
        (the app never writes the server's absolute paths into a file it hands out)."""
        checkpoint = run.snapshot_path(epoch) if run is not None and epoch is not None else None
        prov = cls(figure=figure, run=None if run is None else run_name_in(run.path, root), epoch=epoch,
                   checkpoint_sha256=file_sha256(checkpoint) if checkpoint else None, input_source=input_source,
                   params=numbered_from_one(params or {}), regenerable=regenerable)
        if tokens is None:
            return prov
        tok = np.asarray(tokens)
        small = tok.size <= 4096  # the tokens themselves only when small; their hash always
        return replace(prov, input_sha256=tokens_sha256(tok), input_tokens=tok.tolist() if small else None,
                       input_targets=np.asarray(targets).tolist() if small and targets is not None else None)

    def tokens_array(self) -> np.ndarray:
        return np.asarray(self.input_tokens)

    def targets_array(self):
        t = self.input_targets
        return np.asarray(t) if isinstance(t, list) else t

    def to_dict(self, settings: ExportSettings | None = None) -> dict:
        out = {k: v for k, v in asdict(self).items() if v is not None or k in ("run", "epoch")}
        out.update(settings=asdict(settings or ExportSettings()), package="damcha", package_version=__version__,
                   created=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"))
        return out

    @classmethod
    def from_dict(cls, d: dict) -> Provenance:
        """Read a provenance JSON written by to_dict (older files without `regenerable` count as named figures)."""
        if not isinstance(d, dict) or "figure" not in d:
            raise ValueError("not a DAMCHA provenance file (no 'figure')")
        own = {f.name for f in fields(cls)}
        values = {k: v for k, v in d.items() if k in own}
        values.setdefault("regenerable", d.get("run") is not None)
        return cls(**values)


@dataclass(frozen=True)
class ExportItem:
    """One figure ready to export: its name (file stem), the figure and its provenance."""

    name: str
    figure: go.Figure
    provenance: Provenance


def item_files(item: ExportItem, formats: Iterable[str], settings: ExportSettings | None = None) -> dict[str, bytes]:
    """{filename: bytes} for one figure in the given formats, plus its provenance JSON."""
    settings = settings or ExportSettings()
    files: dict[str, bytes] = {}
    data = None
    for fmt in formats:
        if fmt in (*STATIC_FORMATS, "html"):
            files[f"{item.name}.{fmt}"] = figure_bytes(item.figure, fmt, settings, item.name)
        elif fmt in ("csv", "npz"):
            data = figure_data(item.figure) if data is None else data
            files[f"{item.name}.{fmt}"] = data_csv(data) if fmt == "csv" else data_npz(data)
        else:
            raise ValueError(f"unknown format {fmt!r}; expected some of {ALL_FORMATS}")
    prov = {**item.provenance.to_dict(settings), "files": sorted(files)}
    files[f"{item.name}.provenance.json"] = json.dumps(prov, indent=2).encode()
    return files


def write_item(item: ExportItem, out_dir: str | Path, formats: Iterable[str],
               settings: ExportSettings | None = None) -> list[Path]:
    """Write one figure's files atomically (an interrupted export leaves no half-written file)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, raw in item_files(item, formats, settings).items():
        with atomic_path(out / name) as tmp:
            tmp.write_bytes(raw)
        paths.append(out / name)
    return paths


class ExportFailed(RuntimeError):
    """One figure of a bundle could not be exported: its name and why."""

    def __init__(self, figure: str, cause: Exception):
        super().__init__(f"figure {figure!r}: {type(cause).__name__}: {str(cause)[:300]}")
        self.figure = figure


def zip_bundle(items: Iterable[ExportItem], formats: Iterable[str], settings: ExportSettings | None = None,
               progress: Callable[[int, str], None] | None = None) -> bytes:
    """A ZIP of every item's files and a manifest.json listing them. progress(done, name) is called after each
    figure; a figure that cannot be exported ends the bundle with ExportFailed naming it."""
    formats = list(formats)
    unknown = [f for f in formats if f not in ALL_FORMATS]
    if unknown:
        raise ValueError(f"unknown formats {unknown}; expected some of {ALL_FORMATS}")
    buf = io.BytesIO()
    manifest = []
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for done, item in enumerate(items, 1):
            try:
                files = item_files(item, formats, settings)
            except Exception as e:  # noqa: BLE001 - whatever failed, the bundle says which figure it was
                raise ExportFailed(item.name, e) from e
            for name, raw in files.items():
                z.writestr(name, raw)
            manifest.append({"figure": item.name, "files": sorted(files)})
            if progress is not None:
                progress(done, item.name)
        z.writestr("manifest.json", json.dumps(manifest, indent=2))
    return buf.getvalue()
