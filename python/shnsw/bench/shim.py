"""The storage-latency shim (bench/latency/pread_delay.c) from Python.

`Shim` owns the control file that the LD_PRELOAD library maps in every
server process: the benchmark switches the delay on and off, changes it, and
reads the counters of delayed reads while the server runs, without a restart.

    shim = Shim.create()
    with Cluster(env=shim.server_env(datadir_hint)) ...   # see server_env()
    shim.set(enabled=True, delay_us=300)
    before = shim.counters(); ...query...; after = shim.counters()
"""

from __future__ import annotations

import mmap
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

from ..cluster import ROOT

SRC = ROOT / "bench" / "latency" / "pread_delay.c"
LIB = ROOT / "bench" / "latency" / "pread_delay.so"
MAGIC = 0x53484E5357505244
FMT = "<Qqq QQQQQ QQqQ ii QQQ"   # magic, delay_us, enabled, reads, bytes, sleep_ns, other,
                                # pad; busy_ns, bursts, inflight, busy_start_ns, lock, pad
SIZE = struct.calcsize(FMT)     # 128 bytes
FIELDS = ("magic", "delay_us", "enabled", "reads", "bytes", "sleep_ns", "other_reads", "pad",
          "busy_ns", "bursts")


def ensure_built() -> Path:
    """Compile the library if it is missing or older than its source."""
    if not LIB.exists() or LIB.stat().st_mtime < SRC.stat().st_mtime:
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if not cc:
            raise RuntimeError("no C compiler (cc) to build the latency shim")
        subprocess.run([cc, "-O2", "-Wall", "-shared", "-fPIC", "-o", str(LIB),
                        str(SRC), "-ldl"], check=True)
    os.chmod(LIB, 0o755)
    return LIB


class Shim:
    def __init__(self, ctl_path: Path):
        self.ctl_path = Path(ctl_path)
        self._f = open(self.ctl_path, "r+b")
        if os.fstat(self._f.fileno()).st_size < SIZE:
            # a control file of an older shim: grow it (zeros); a server
            # started with it sees the busy fields once it is restarted
            self._f.truncate(SIZE)
        self._mm = mmap.mmap(self._f.fileno(), SIZE)

    @classmethod
    def create(cls) -> "Shim":
        lib = ensure_built()
        d = Path(tempfile.mkdtemp(prefix="shnsw-shim-"))
        os.chmod(d, 0o755)
        p = d / "ctl"
        with open(p, "wb") as f:
            f.write(struct.pack(FMT, MAGIC, *([0] * 16)))
        os.chmod(p, 0o666)
        s = cls(p)
        s.lib = lib
        return s

    def server_env(self, base_dir: Path | None = None) -> dict:
        """Environment for the server: preload the shim, point it at the control
        file and (when known) at the data directory's base/."""
        env = {"LD_PRELOAD": str(ensure_built()), "SHNSW_PREAD_CTL": str(self.ctl_path)}
        if base_dir is not None:
            env["SHNSW_PREAD_DIR"] = str(Path(base_dir).resolve()) + "/"
        return env

    def _get(self, i: int) -> int:
        return struct.unpack_from("<q" if i in (1, 2) else "<Q", self._mm, i * 8)[0]

    def set(self, enabled: bool | None = None, delay_us: int | None = None) -> None:
        if delay_us is not None:
            struct.pack_into("<q", self._mm, 8, int(delay_us))
        if enabled is not None:
            struct.pack_into("<q", self._mm, 16, 1 if enabled else 0)

    @property
    def delay_us(self) -> int:
        return self._get(1)

    @property
    def enabled(self) -> bool:
        return bool(self._get(2))

    def counters(self) -> dict:
        vals = struct.unpack_from(FMT, self._mm, 0)
        return dict(zip(FIELDS, vals))

    def close(self) -> None:
        try:
            self._mm.close()
            self._f.close()
        finally:
            shutil.rmtree(self.ctl_path.parent, ignore_errors=True)


def diff(after: dict, before: dict) -> dict:
    return {k: after[k] - before[k]
            for k in ("reads", "bytes", "sleep_ns", "other_reads", "busy_ns", "bursts")}
