"""What one kernel launch moves, counted without a GPU (issue 36): the record both counters fill
(cuda_sim's instrumented device code, ``traffic_cuda``; the Triton interpreter, ``traffic_triton``)
and the CSV row ``specops bench --ops traffic`` prints.

Terms (as Nsight Compute counts global loads and stores):
- a *request* is one warp's execution of one access site: 32 consecutive threads of a CTA (CUDA),
  or, for a Triton program, one ``tl.load``/``tl.store`` call split into 32-lane groups of its
  active (unmasked) lanes in order; the k-th execution of a site between two barriers by a warp
  is one request;
- its *sectors* are the distinct 32-byte aligned segments its active lanes touch;
- bytes are the bytes the active lanes ask for (``bytes_read``/``bytes_written``); ``sectors * 32``
  is what the memory system moves for them at best (no reuse across requests).
"""

from __future__ import annotations

from dataclasses import dataclass, field

SECTOR = 32  # bytes
WARP = 32  # lanes


@dataclass
class KernelTraffic:
    backend: str  # "cuda" (counted through cuda_sim) or "triton" (the interpreter)
    kernel: str
    grid: tuple[int, int, int]
    bytes_read: int = 0
    bytes_written: int = 0
    requests: int = 0  # warp-level load and store requests
    sectors: int = 0  # sum over requests of their distinct 32-byte sectors
    cta_bytes: list[int] = field(default_factory=list)  # bytes each CTA read + wrote
    barriers: int = 0  # barriers executed, summed over CTAs (CUDA: __syncthreads)
    cta_barriers: list[int] = field(default_factory=list)  # each CTA's (CUDA; empty: Triton)

    @property
    def ctas(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def ctas_with_work(self) -> int:
        """CTAs that move at least 1% of the busiest CTA's bytes (a CTA that only reads its
        request's length and returns does not count)."""
        top = max(self.cta_bytes, default=0)
        return sum(1 for b in self.cta_bytes if top and 100 * b >= top)

    @property
    def critical_cta_bytes(self) -> int:
        return max(self.cta_bytes, default=0)

    @property
    def critical_cta(self) -> int:
        """Index (into cta_bytes) of the CTA that moves the most bytes."""
        return max(range(len(self.cta_bytes)), key=self.cta_bytes.__getitem__, default=0)

    @property
    def critical_cta_barriers(self) -> int:
        """Barriers of the critical CTA: its dependent passes (0 where not counted)."""
        return self.cta_barriers[self.critical_cta] if self.cta_barriers else 0

    @property
    def sectors_per_request(self) -> float:
        return self.sectors / self.requests if self.requests else 0.0

    @property
    def barriers_per_cta(self) -> float:
        return self.barriers / self.ctas if self.ctas else 0.0


CSV_FIELDS = (
    "traffic,op,backend,kernel,shape,bytes_read,bytes_written,min_bytes,sectors_per_request,"
    "ctas,ctas_with_work,critical_cta_bytes,barriers_per_cta,predicted_us"
)


def csv_row(op: str, shape: str, t: KernelTraffic, min_bytes: int, predicted_us: float) -> str:
    """One line of ``specops bench --ops traffic`` (fields: CSV_FIELDS)."""
    return (
        f"traffic,{op},{t.backend},{t.kernel},{shape},{t.bytes_read},{t.bytes_written},"
        f"{min_bytes},{t.sectors_per_request:.2f},{t.ctas},{t.ctas_with_work},"
        f"{t.critical_cta_bytes},{t.barriers_per_cta:.2f},{predicted_us:.2f}"
    )
