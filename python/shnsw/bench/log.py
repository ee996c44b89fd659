"""The benchmark's console log and what every result records about the machine."""

from __future__ import annotations

import os
import platform
import time


class Log:
    def __init__(self):
        self.t0 = time.perf_counter()

    def __call__(self, msg="", flush=True):
        print(msg, flush=flush)

    def step(self, msg):
        print(f"[{time.perf_counter() - self.t0:6.0f} s] {msg}", flush=True)


def machine_info() -> dict:
    info = {"platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            info["mem_kb"] = int(f.readline().split()[1])
    except OSError:
        pass
    return info


def with_unit(setting: str, unit) -> str:
    """pg_settings value with its unit: '262144' '8kB' -> '2048MB'."""
    if not unit:
        return setting
    if unit == "8kB" and setting.lstrip("-").isdigit():
        kb = int(setting) * 8
        return f"{kb // 1024}MB" if kb % 1024 == 0 else f"{kb}kB"
    return setting + unit
