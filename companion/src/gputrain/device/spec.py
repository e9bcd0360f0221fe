"""One GPU's published figures: the :class:`GPUSpec` record and the units its capacities are in (chapter 11)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

KiB = 1024  # NVIDIA's architecture documents mean binary kilobytes: "228 KB" of shared memory is 228 x 1024 bytes
MiB = 1024 * KiB
GiB = 1024 * MiB  # and HBM's "80 GB" is 80 GiB: five stacks of 16 GiB


@dataclass(frozen=True)
class GPUSpec:
    """Published figures of one data-center GPU, each with its source (chapter 11, "The memory hierarchy").

    ``peaks`` holds dense (no sparsity) FLOP/s per format; ``fp64`` is the
    FP64 Tensor Core rate.  Capacities are bytes, and NVIDIA's units are
    binary throughout: 228 KB of shared memory is 228 KiB and an "80 GB" HBM
    is 80 GiB (five 16 GiB stacks).  Bandwidths are bytes/s, NVLink counting
    both directions.  ``None`` means no source we cite gives the figure and
    nothing can be derived from one; the table never fills a gap by guessing.
    ``sources`` maps every field that has a value to the BibTeX keys of
    ``book/references.bib`` it comes from, and ``notes`` says why wherever
    that needs a sentence.  ``inferred`` lists the figures that no source
    gives for this card and that are carried over from the H100 SXM5, whose
    sources they cite; a page that shows one says "inferred from the H100".
    """

    name: str  # the table's key, also accepted as a device name: "H100" is the H100 SXM5
    model: str  # the exact product: "H100 SXM5 80 GB"
    peaks: dict[str, float]  # dense peak FLOP/s per format: fp64, fp32, tf32, bf16, fp16, fp8
    sources: dict[str, tuple[str, ...]]  # field -> BibTeX keys
    notes: dict[str, str] = field(default_factory=dict)  # field -> why a figure is what it is
    inferred: tuple[str, ...] = ()  # fields no source gives for this card: the H100 SXM5's figure
    aliases: tuple[str, ...] = ()  # torch.cuda.get_device_name() strings of this exact card
    sms: Optional[int] = None  # streaming multiprocessors
    warp_size: Optional[int] = None  # threads that execute one instruction together
    max_warps_per_sm: Optional[int] = None  # resident warps an SM can hold at once
    tensor_cores_per_sm: Optional[int] = None
    registers_per_sm: Optional[int] = None  # bytes of register file per SM
    l1_shared_per_sm: Optional[int] = None  # bytes of combined L1 data cache and shared memory per SM
    shared_per_sm: Optional[int] = None  # bytes: the largest shared-memory carve-out of that
    shared_bytes_per_clock: Optional[int] = None  # per SM: 32 banks x 4 bytes (derived from the bank rules)
    l2_bytes: Optional[int] = None
    l2_bytes_per_clock: Optional[int] = None  # L2 read bandwidth per clock, whole chip
    hbm_bytes: Optional[float] = None
    hbm_bandwidth: Optional[float] = None  # bytes/s
    boost_clock_hz: Optional[float] = None  # the highest boost clock (the FP32 and FP64 peaks use it)
    tensor_clock_hz: Optional[float] = None  # the clock the 16- and 8-bit tensor peaks are quoted at
    nvlink_bandwidth: Optional[float] = None  # bytes/s, both directions together

    def figure(self, name: str):
        """One field by name, or the dense peak of a format (``"bf16"``)."""
        return self.peaks.get(name) if name in PEAK_FORMATS else getattr(self, name)

    @property
    def shared_bandwidth(self) -> Optional[float]:
        """Aggregate shared-memory (SRAM) bandwidth, bytes/s: bytes per clock per SM x SMs x boost clock."""
        if None in (self.shared_bytes_per_clock, self.sms, self.boost_clock_hz):
            return None
        return self.shared_bytes_per_clock * self.sms * self.boost_clock_hz

    @property
    def shared_to_hbm(self) -> Optional[float]:
        """How many times HBM's bandwidth the shared memory of all SMs delivers."""
        sram = self.shared_bandwidth
        return None if sram is None or not self.hbm_bandwidth else sram / self.hbm_bandwidth

    @property
    def l2_bandwidth(self) -> Optional[float]:
        """L2 read bandwidth, bytes/s, where NVIDIA publishes bytes per clock (the A100); else ``None``."""
        if self.l2_bytes_per_clock is None or self.boost_clock_hz is None:
            return None
        return self.l2_bytes_per_clock * self.boost_clock_hz

    def ridge(self, dtype: str = "bf16") -> Optional[float]:
        """FLOPs per byte of HBM traffic at which ``dtype`` products stop being memory-bound."""
        peak = self.peaks.get(dtype)
        return None if peak is None or not self.hbm_bandwidth else peak / self.hbm_bandwidth


PEAK_FORMATS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")
