"""NVIDIA GPUs through NVML (`pynvml`, from the official nvidia-ml-py distribution).

"Unavailable" is a value with a reason, never an exception: no NVML library, no driver, no GPU, no permission,
or a GPU that fell off the bus mid-run all end up as `GpuProbe.unavailable = "unavailable: <reason>"`.

NVML utilization is the percent of the last sample period (1/6 to 1 s, by device) in which some kernel ran:
not how much of the GPU was used, only whether anything was running.
"""

from __future__ import annotations

import contextlib
import threading
from types import ModuleType
from typing import Any

from loadertop.core.model.events import GpuSample
from loadertop.core.model.figures import MB
from loadertop.core.model.results import GpuInfo

# NVML error code name -> what to tell the user. Looked up by name so a fake module needs only the ones it uses.
_REASONS = {
    "NVML_ERROR_LIBRARY_NOT_FOUND": "NVML library not found",
    "NVML_ERROR_DRIVER_NOT_LOADED": "NVIDIA driver not loaded",
    "NVML_ERROR_NO_PERMISSION": "no permission to use NVML",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": "NVIDIA driver and NVML library versions differ (reload driver or reboot)",
    "NVML_ERROR_GPU_IS_LOST": "GPU is lost (fell off the bus)",
    "NVML_ERROR_NOT_SUPPORTED": "not supported by this GPU (MIG instance or vGPU?)",
    "NVML_ERROR_FUNCTION_NOT_FOUND": "NVML library too old for this query",
    "NVML_ERROR_RESET_REQUIRED": "GPU requires a reset",
    "NVML_ERROR_UNINITIALIZED": "NVML not initialized",
}


def _error_text(error: BaseException) -> str:
    try:
        text = str(error)
    except Exception:  # pynvml's __str__ can call into a library that is not there
        text = ""
    text = " ".join(text.split())  # one line
    return text or type(error).__name__


def describe_error(nvml: ModuleType | Any, error: BaseException) -> str:
    """One line saying what went wrong, for an exception raised by (real or fake) pynvml."""
    value = getattr(error, "value", None)
    if value is not None:
        for name, reason in _REASONS.items():
            if getattr(nvml, name, object()) == value:
                return reason
    base = getattr(nvml, "NVMLError", None)
    if isinstance(base, type) and isinstance(error, base):
        return _error_text(error)
    return f"{type(error).__name__}: {_error_text(error)}"


def unavailable_reason(nvml: ModuleType | Any, error: BaseException) -> str:
    """The line `GpuProbe.unavailable` holds for an exception raised by pynvml: "unavailable: <what>"."""
    return f"unavailable: {describe_error(nvml, error)}"


class GpuProbe:
    """NVML devices and samples. Never raises: any failure sets `unavailable` ("unavailable: reason").

    `sample()` reads utilization (percent of the last 1/6-1 s in which some kernel ran) and memory used.
    Thread-safe: the probes thread samples while the driver may close.
    """

    def __init__(self, nvml: ModuleType | Any | None = None) -> None:
        self.unavailable: str | None = None
        self._nvml: Any = None
        self._handles: tuple[Any, ...] = ()
        self._devices: tuple[GpuInfo, ...] = ()
        self._initialized = False
        self._lock = threading.Lock()
        if nvml is None:
            try:
                import pynvml
            except ImportError:
                self.unavailable = "unavailable: NVML bindings (nvidia-ml-py) not installed"
                return
            except Exception as exc:  # a broken install must not take the app down
                self.unavailable = f"unavailable: cannot import pynvml: {_error_text(exc)}"
                return
            nvml = pynvml
        self._nvml = nvml
        try:
            nvml.nvmlInit()
        except Exception as exc:
            self.unavailable = unavailable_reason(nvml, exc)
            return
        self._initialized = True
        try:
            count = int(nvml.nvmlDeviceGetCount())
            handles = []
            devices = []
            for index in range(count):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                name = nvml.nvmlDeviceGetName(handle)
                if isinstance(name, bytes):  # older pynvml returns bytes
                    name = name.decode(errors="replace")
                total = nvml.nvmlDeviceGetMemoryInfo(handle).total
                handles.append(handle)
                devices.append(GpuInfo(index=index, name=str(name), memory_total_mb=float(total) / MB))
        except Exception as exc:
            self.unavailable = unavailable_reason(nvml, exc)
            self.close()
            return
        if not devices:
            self.unavailable = "unavailable: no NVIDIA GPU found"
            self.close()
            return
        self._handles = tuple(handles)
        self._devices = tuple(devices)

    @property
    def available(self) -> bool:
        return self.unavailable is None

    def devices(self) -> tuple[GpuInfo, ...]:
        """The GPUs found at start-up (still listed if one later fails: see `unavailable`)."""
        return self._devices

    def sample(self) -> tuple[GpuSample, ...]:
        """One utilization and memory reading per GPU; () once unavailable (the reason is in `unavailable`)."""
        with self._lock:
            if self.unavailable is not None or not self._initialized:
                return ()
            nvml = self._nvml
            samples = []
            index = -1
            try:
                for info, handle in zip(self._devices, self._handles, strict=True):
                    index = info.index
                    util = nvml.nvmlDeviceGetUtilizationRates(handle).gpu
                    used = nvml.nvmlDeviceGetMemoryInfo(handle).used
                    samples.append(GpuSample(index=index, util_percent=float(util), mem_used_mb=float(used) / MB))
            except Exception as exc:
                self.unavailable = f"unavailable: GPU {index}: {describe_error(nvml, exc)}"
                return ()
            return tuple(samples)

    def gpus_running(self, pids: set[int]) -> set[int]:
        """The indices of the GPUs whose running compute processes include one of `pids` (a GPU that cannot list
        its processes counts as not running them); empty when NVML is unavailable."""
        found: set[int] = set()
        with self._lock:
            if self.unavailable is not None or not self._initialized:
                return found
            for info, handle in zip(self._devices, self._handles, strict=True):
                try:
                    processes = self._nvml.nvmlDeviceGetComputeRunningProcesses(handle)
                except Exception:
                    continue
                if any(int(p.pid) in pids for p in processes):
                    found.add(info.index)
        return found

    def close(self) -> None:
        """Shut NVML down (once). Safe to call many times, and when NVML never started."""
        with self._lock:
            if not self._initialized:
                return
            self._initialized = False
            if self.unavailable is None:
                self.unavailable = "unavailable: closed"
            with contextlib.suppress(Exception):  # shutting down: nothing useful to do with an error
                self._nvml.nvmlShutdown()

    def __enter__(self) -> GpuProbe:
        return self

    def __exit__(self, *_exc_info: object) -> None:
        self.close()
