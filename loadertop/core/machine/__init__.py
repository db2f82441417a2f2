"""The machine as loadertop's process sees it: probes (psutil, NVML), usable CPUs and memory, the memory guard."""
