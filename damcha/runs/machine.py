"""What a machine's processor and devices are called, for the records that depend on them (results.json's
machine, the cost table's device)."""

from __future__ import annotations

from pathlib import Path

import torch

NO_GPU_HERE = "a GPU not on this machine (name it with --cost-device)"


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The processor as the kernel names it: vendor, family, model and stepping, and its name ("" off
    Linux). Two machines whose torch reports the same CPU kernels (AVX512) can still round differently:
    the math libraries pick code paths by CPU model (docs/evidence.md, "What reproduces where")."""
    try:
        first = cpuinfo.read_text(errors="replace").split("\n\n", 1)[0]
    except OSError:
        return ""
    fields = dict(line.split(":", 1) for line in first.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    return (f"{fields.get('vendor_id', '?')} family {fields.get('cpu family', '?')} model {fields.get('model', '?')} "
            f"stepping {fields.get('stepping', '?')} ({fields.get('model name', '?')})")


def device_name(device: str | torch.device, threads: int | None = None) -> str:
    """The device a training step runs on, as the cost table names it: a GPU's name, or the CPU's model and
    the threads a step uses (default: torch's now; a CPU step's time depends on both)."""
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        return NO_GPU_HERE
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    threads = threads or torch.get_num_threads()
    return f"CPU {cpu_model() or 'unknown'}, {threads} thread{'s' if threads > 1 else ''}"
