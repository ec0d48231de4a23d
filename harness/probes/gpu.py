"""Processes holding GPU memory, through NVML (the nvidia-ml-py package, imported as ``pynvml``).

Never imports torch (initialising CUDA in the harness would itself hold device
memory and would break forking).  Without pynvml, without a driver, or without
a device, :func:`gpu_processes` returns None: "no GPU probe here", which the
checker ``gpu_memory_released`` reports as unknown, not as a pass.

NVML reports host pids; inside a container with its own pid namespace they may
not match ``os.getpid()`` of the processes we started (the checker then sees
unknown pids, which it should report rather than ignore).
"""

from __future__ import annotations

import importlib
from typing import Any

from harness.probes.model import GpuProc

__all__ = ["gpu_processes"]


def _used(p: Any) -> int:
    used = getattr(p, "usedGpuMemory", None)
    return int(used) if isinstance(used, int) else 0  # None: NVML cannot tell (e.g. under MIG without rights)


def gpu_processes(errors: list[str] | None = None) -> tuple[tuple[GpuProc, ...], dict[int, int]] | None:
    """(every process holding device memory, device index -> bytes used), or None without NVML.

    Compute and graphics processes are both listed, once per (device, pid).
    Error handling: never raises; a device that cannot be queried is noted in
        ``errors`` and left out.
    """
    try:
        nvml: Any = importlib.import_module("pynvml")
    except Exception:
        return None
    try:
        nvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...
        return None
    procs: dict[tuple[int, int], GpuProc] = {}
    used: dict[int, int] = {}
    try:
        count = int(nvml.nvmlDeviceGetCount())
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                used[index] = int(nvml.nvmlDeviceGetMemoryInfo(handle).used)
                found = list(nvml.nvmlDeviceGetComputeRunningProcesses(handle))
                try:
                    found += list(nvml.nvmlDeviceGetGraphicsRunningProcesses(handle))
                except Exception:
                    pass  # not supported on every device: the compute list is what matters
            except Exception as exc:
                if errors is not None:
                    errors.append(f"nvml device {index}: {exc}")
                continue
            for p in found:
                key = (index, int(p.pid))
                if key not in procs or _used(p) > procs[key].used_bytes:
                    procs[key] = GpuProc(index, int(p.pid), _used(p))
    except Exception as exc:
        if errors is not None:
            errors.append(f"nvml: {exc}")
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
    return tuple(procs[k] for k in sorted(procs)), used
