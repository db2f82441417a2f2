"""GpuProbe against a fake NVML module, and once against the real pynvml (no GPU here: unavailable, no raise)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from loadertop.core.machine.gpu import GpuProbe
from loadertop.core.model.events import GpuSample
from loadertop.core.model.figures import MB
from loadertop.core.model.results import GpuInfo

pytestmark = pytest.mark.unit

# The real pynvml codes, so the fake maps errors the way pynvml does.
CODES = {
    "NVML_ERROR_UNINITIALIZED": 1,
    "NVML_ERROR_NO_PERMISSION": 4,
    "NVML_ERROR_DRIVER_NOT_LOADED": 9,
    "NVML_ERROR_LIBRARY_NOT_FOUND": 12,
    "NVML_ERROR_GPU_IS_LOST": 15,
    "NVML_ERROR_UNKNOWN": 999,
}
TEXT = {
    1: "Uninitialized",
    4: "Insufficient Permissions",
    9: "Driver Not Loaded",
    12: "NVML Shared Library Not Found",
    15: "GPU is lost",
    999: "Unknown Error",
}


@dataclass
class FakeGpu:
    name: str
    total_mb: float
    util: int = 0
    used_mb: float = 0.0


@dataclass
class FakeNvml:
    """State behind a fake `pynvml` module: what it has, what should fail, what was called."""

    gpus: list[FakeGpu] = field(default_factory=list)
    init_error: int | None = None
    count_error: int | None = None
    lose_gpu_on_sample: int | None = None  # GPU index whose utilization query raises GPU_IS_LOST
    calls: list[str] = field(default_factory=list)

    def module(self) -> ModuleType:
        state = self
        mod = ModuleType("fake_pynvml")

        class NVMLError(Exception):
            def __init__(self, value: int) -> None:
                super().__init__(value)
                self.value = value

            def __str__(self) -> str:
                return TEXT.get(self.value, f"NVML error {self.value}")

        def check(code: int | None) -> None:
            if code is not None:
                raise NVMLError(code)

        def nvmlInit() -> None:
            state.calls.append("init")
            check(state.init_error)

        def nvmlShutdown() -> None:
            state.calls.append("shutdown")

        def nvmlDeviceGetCount() -> int:
            check(state.count_error)
            return len(state.gpus)

        def nvmlDeviceGetHandleByIndex(index: int) -> int:
            return index

        def nvmlDeviceGetName(handle: int) -> str:
            return state.gpus[handle].name

        def nvmlDeviceGetMemoryInfo(handle: int) -> Any:
            gpu = state.gpus[handle]
            return SimpleNamespace(total=int(gpu.total_mb * MB), used=int(gpu.used_mb * MB), free=0)

        def nvmlDeviceGetUtilizationRates(handle: int) -> Any:
            if state.lose_gpu_on_sample == handle:
                raise NVMLError(CODES["NVML_ERROR_GPU_IS_LOST"])
            return SimpleNamespace(gpu=state.gpus[handle].util, memory=0)

        for name, fn in list(locals().items()):
            if name.startswith("nvml"):
                setattr(mod, name, fn)
        mod.NVMLError = NVMLError  # type: ignore[attr-defined]
        for name, code in CODES.items():
            setattr(mod, name, code)
        return mod


def two_gpus() -> FakeNvml:
    return FakeNvml(
        gpus=[FakeGpu("NVIDIA H100 80GB HBM3", 81559, util=37, used_mb=1200), FakeGpu("NVIDIA H100", 81559)]
    )


def test_happy_path_two_gpus() -> None:
    fake = two_gpus()
    probe = GpuProbe(nvml=fake.module())
    assert probe.available and probe.unavailable is None
    assert probe.devices() == (
        GpuInfo(index=0, name="NVIDIA H100 80GB HBM3", memory_total_mb=pytest.approx(81559)),
        GpuInfo(index=1, name="NVIDIA H100", memory_total_mb=pytest.approx(81559)),
    )
    samples = probe.sample()
    assert samples == (
        GpuSample(index=0, util_percent=37.0, mem_used_mb=pytest.approx(1200)),
        GpuSample(index=1, util_percent=0.0, mem_used_mb=0.0),
    )
    fake.gpus[1].util = 99
    assert probe.sample()[1].util_percent == 99.0
    probe.close()
    probe.close()
    assert fake.calls.count("shutdown") == 1
    assert probe.sample() == ()


def test_bytes_names_are_decoded() -> None:
    fake = two_gpus()
    mod = fake.module()
    mod.nvmlDeviceGetName = lambda handle: b"Tesla T4"  # type: ignore[attr-defined]
    with GpuProbe(nvml=mod) as probe:
        assert [d.name for d in probe.devices()] == ["Tesla T4", "Tesla T4"]


def test_library_not_found() -> None:
    fake = FakeNvml(init_error=CODES["NVML_ERROR_LIBRARY_NOT_FOUND"])
    probe = GpuProbe(nvml=fake.module())
    assert not probe.available
    assert probe.unavailable == "unavailable: NVML library not found"
    assert probe.devices() == () and probe.sample() == ()
    probe.close()
    assert "shutdown" not in fake.calls  # never initialised: nothing to shut down


def test_driver_not_loaded() -> None:
    probe = GpuProbe(nvml=FakeNvml(init_error=CODES["NVML_ERROR_DRIVER_NOT_LOADED"]).module())
    assert probe.unavailable == "unavailable: NVIDIA driver not loaded"


def test_no_permission_and_unknown_codes() -> None:
    probe = GpuProbe(nvml=FakeNvml(init_error=CODES["NVML_ERROR_NO_PERMISSION"]).module())
    assert probe.unavailable is not None and "permission" in probe.unavailable
    probe = GpuProbe(nvml=FakeNvml(init_error=CODES["NVML_ERROR_UNKNOWN"]).module())
    assert probe.unavailable == "unavailable: Unknown Error"


def test_no_devices() -> None:
    fake = FakeNvml(gpus=[])
    probe = GpuProbe(nvml=fake.module())
    assert probe.unavailable == "unavailable: no NVIDIA GPU found"
    assert probe.devices() == () and probe.sample() == ()
    assert fake.calls == ["init", "shutdown"]


def test_error_while_listing_devices_shuts_down() -> None:
    fake = FakeNvml(gpus=[FakeGpu("x", 1)], count_error=CODES["NVML_ERROR_NO_PERMISSION"])
    probe = GpuProbe(nvml=fake.module())
    assert probe.unavailable is not None and "permission" in probe.unavailable
    assert fake.calls == ["init", "shutdown"]


def test_non_nvml_exception_at_init() -> None:
    mod = two_gpus().module()

    def broken() -> None:
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    mod.nvmlInit = broken  # type: ignore[attr-defined]
    probe = GpuProbe(nvml=mod)
    assert probe.unavailable == "unavailable: OSError: libnvidia-ml.so.1: cannot open shared object file"


def test_error_mid_sample() -> None:
    fake = two_gpus()
    probe = GpuProbe(nvml=fake.module())
    assert len(probe.sample()) == 2
    fake.lose_gpu_on_sample = 1  # GPU 1 falls off the bus
    assert probe.sample() == ()
    assert probe.unavailable is not None
    assert probe.unavailable.startswith("unavailable: GPU 1:") and "lost" in probe.unavailable
    assert "\n" not in probe.unavailable
    assert not probe.available
    assert probe.sample() == ()  # stays unavailable, still no exception
    assert len(probe.devices()) == 2  # what was found at start-up is still listed
    probe.close()
    assert fake.calls.count("shutdown") == 1


def test_pynvml_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    probe = GpuProbe()
    assert probe.unavailable is not None and probe.unavailable.startswith("unavailable: ")
    assert probe.sample() == ()
    probe.close()


def test_real_pynvml_never_raises() -> None:
    probe = GpuProbe()
    try:
        if probe.available:  # on a GPU machine
            assert probe.devices()
            assert len(probe.sample()) == len(probe.devices())
        else:
            assert probe.unavailable and probe.unavailable.startswith("unavailable: ")
            assert len(probe.unavailable) > len("unavailable: ")
            assert "\n" not in probe.unavailable
            assert probe.devices() == () and probe.sample() == ()
    finally:
        probe.close()
