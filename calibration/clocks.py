"""The GPU's SM clock, power and temperature while passes are timed (nvidia-smi in the background).

Why: at its power cap an H200 lowers its SM clock by up to ~15 % on GEMM-heavy passes and much
less on attention-heavy ones (benchmarks/results/sustained_load_h200.json), and a pass's operands
change its draw (docs/calibration.md, "Token ids and the power cap"). Recording the clock and power
over each point's timed repeats lets a fit, or a person, see which points ran throttled.

One sampler per sweep: `nvidia-smi -lms` prints a line every `period_ms`; a thread stamps each
with the monotonic clock on arrival. `window(t0, t1)` summarises the lines stamped in between.
No GPU, no nvidia-smi, or a sampler that dies: `start` returns None / `window` returns None, and
the sweep goes on without clocks (its records say so by the key's absence).
"""

from __future__ import annotations

import bisect
import statistics
import subprocess
import threading
import time

QUERY = "clocks.sm,power.draw,temperature.gpu"


class ClockMonitor:
    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.rows: list[tuple[float, float, float, float]] = []  # (monotonic s, SM MHz, W, C)
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    @classmethod
    def start(cls, index: int = 0, period_ms: int = 100, command: str = "nvidia-smi") -> "ClockMonitor | None":
        try:
            proc = subprocess.Popen([command, f"--id={index}", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
                                     f"-lms={int(period_ms)}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                    text=True)
        except OSError:
            return None
        return cls(proc)

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                sm, w, c = (float(x) for x in line.strip().split(","))
            except ValueError:  # "[N/A]" fields or a partial line
                continue
            with self._lock:
                self.rows.append((time.monotonic(), sm, w, c))
                if len(self.rows) > 200_000:  # ~5 hours at 10 Hz: keep the recent half
                    del self.rows[:100_000]

    def window(self, t0: float, t1: float) -> dict | None:
        """Median SM clock and power, highest temperature, over lines stamped in [t0, t1]
        (monotonic seconds); None if there are none."""
        with self._lock:  # rows arrive in time order
            a = bisect.bisect_left(self.rows, (t0,))
            b = bisect.bisect_right(self.rows, (t1, float("inf")))
            r = self.rows[a:b]
        if not r:
            return None
        return {"sm_mhz": statistics.median(x[1] for x in r), "sm_mhz_min": min(x[1] for x in r),
                "power_w": round(statistics.median(x[2] for x in r), 1), "temp_c": max(x[3] for x in r),
                "samples": len(r)}

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
