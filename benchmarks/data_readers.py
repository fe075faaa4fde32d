"""Memory of the data readers: each reads ALL of a generated ~100 MB file in its standard format,
batch by batch, in a fresh process; printed against reading the same bytes the naive way (all
in memory at once) in the same run.

"anon" is the process's anonymous memory (heap: what a reader holds), sampled after every batch;
"peak rss" (VmHWM) also counts the pages of memory-mapped files, which are the kernel's page cache
and dropped under pressure. Linux only (/proc/self/status).

    python benchmarks/data_readers.py [--mb 100] [--json out.json]
"""

from __future__ import annotations

import argparse
import io
import json
import pickle
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from damcha.inputs.datasets import load_dataset, windows

ROOT = Path(__file__).resolve().parent.parent


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _child(case: str, path: str, batch: int) -> dict:
    """Run in a fresh process: load one data set and read every training row, batch by batch."""
    base = _status_mb("RssAnon")
    peak = 0.0
    if case == "naive":  # every byte in memory at once, as int64 tokens: what the reader avoids
        tokens = torch.frombuffer(bytearray(Path(path).read_bytes()), dtype=torch.uint8).to(torch.int64)
        total = int(tokens[::4096].sum())
        peak = _status_mb("RssAnon") - base
        return {"anon_peak_mb": peak, "rows": len(tokens), "checksum": total, "vm_hwm_mb": _status_mb("VmHWM")}
    name, kwargs = {"enwik8": ("enwik8", {"nonstandard_ok": True}), "enwik8.zip": ("enwik8", {"nonstandard_ok": True}),
                    "parquet-text": ("parquet-text", {}), "parquet-images": ("parquet-images", {}),
                    "cifar10": ("cifar10", {"nonstandard_ok": True})}[case]
    data = load_dataset(name, path, block_size=1024, **kwargs)
    rows, total = 0, 0.0
    if data.stream:
        starts = torch.arange(0, len(data.train_stream) - 1025, 1024)
        for s in starts.split(batch):
            x, _ = windows(data.train_stream, 1024, s)
            rows, total = rows + len(x), total + float(x[:, 0].sum())
            peak = max(peak, _status_mb("RssAnon") - base)
    else:
        for i in range(0, len(data.train_inputs), batch):
            x = data.train_targets[i:i + batch]
            rows, total = rows + len(x), total + float(x[:, 0, 0].sum())
            peak = max(peak, _status_mb("RssAnon") - base)
    return {"anon_peak_mb": peak, "rows": rows, "checksum": total, "vm_hwm_mb": _status_mb("VmHWM")}


def _png(rng) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def generate(folder: Path, mb: float) -> dict[str, Path]:
    """Files of about `mb` megabytes in each reader's standard format."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = int(mb * 1e6)
    rng = np.random.default_rng(0)
    words = np.frombuffer(b"the of and a to in is was <page> [[link]] wiki \n", np.uint8)
    text = b"<mediawiki xmlns>" + rng.choice(words, n).tobytes()
    (folder / "enwik8").write_bytes(text[:n])
    with zipfile.ZipFile(folder / "enwik8.zip", "w", zipfile.ZIP_DEFLATED) as z:
        z.write(folder / "enwik8", "enwik8")
    rows = [text[i:i + 2000].decode("latin-1") for i in range(0, n, 2000)]
    pq.write_table(pa.table({"text": rows}), folder / "text.parquet", row_group_size=1000)  # 2 MB row groups
    png = [_png(rng) for _ in range(int(n / 3150))]  # a random 32x32 PNG is about 3.1 kB
    images = pa.array([{"bytes": b, "path": None} for b in png], pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    pq.write_table(pa.table({"img": images, "label": pa.array(np.arange(len(png)) % 10)}), folder / "images.parquet",
                   row_group_size=1000)
    cifar = folder / "cifar-10-batches-py"
    cifar.mkdir()
    per_batch = max(10, n // 3072 // 6)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8), b"labels": [0] * per_batch}
        (cifar / name).write_bytes(pickle.dumps(batch, protocol=2))
    return {"naive": folder / "enwik8", "enwik8": folder / "enwik8", "enwik8.zip": folder / "enwik8.zip",
            "parquet-text": folder / "text.parquet", "parquet-images": folder / "images.parquet", "cifar10": cifar}


def _size_mb(path: Path) -> float:
    return (sum(f.stat().st_size for f in path.iterdir()) if path.is_dir() else path.stat().st_size) / 1e6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=100.0, help="size of each generated file (default 100)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child[0], args.child[1], args.batch)))
        return 0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        files = generate(Path(tmp), args.mb)
        env = {"DAMCHA_CACHE": str(Path(tmp) / "cache"), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
        for case, path in files.items():
            out = subprocess.run([sys.executable, __file__, "--batch", str(args.batch), "--child", case, str(path)],
                                 capture_output=True, text=True, env=env, check=True)
            row = {"case": case, "file_mb": round(_size_mb(path), 1), **json.loads(out.stdout.strip().splitlines()[-1])}
            rows.append(row)
    naive = next(r for r in rows if r["case"] == "naive")["anon_peak_mb"]
    print(f"{'reader':16s} {'file MB':>8s} {'rows read':>10s} {'anon peak MB':>13s} {'vs naive':>9s} {'peak rss MB':>12s}")
    for r in rows:
        r["ratio_to_naive"] = r["anon_peak_mb"] / naive if naive else float("nan")
        print(f"{r['case']:16s} {r['file_mb']:8.1f} {r['rows']:10,d} {r['anon_peak_mb']:13.1f} "
              f"{r['ratio_to_naive']:8.2f}x {r['vm_hwm_mb']:12.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"mb": args.mb, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
