"""``gputrain scale``: the compute-optimal size, tokens, loss and GPU time for a FLOP budget (chapter 14)."""

from __future__ import annotations

import json

from .flags import _finite_float, _names


def _scale_answer(args) -> dict:
    from ..device import gpu_spec, unknown_gpu
    from ..scaling import LAWS, bill, compute_optimal, gpu_seconds, law_from_results

    if not args.budget > 0:
        raise ValueError(f"--budget must be a positive number of FLOPs, got {args.budget:g}; e.g. --budget 1e21")
    if not 0 < args.mfu <= 1:
        raise ValueError(f"--mfu must be a fraction in (0, 1], got {args.mfu:g}; e.g. --mfu 0.4")
    spec = gpu_spec(args.gpu)
    if spec is None:
        raise ValueError(unknown_gpu(args.gpu))
    peak = spec.peaks.get(args.dtype)
    if peak is None:
        raise ValueError(f"the table gives {spec.name} no {args.dtype} peak; use one of: {', '.join(spec.peaks)}")
    law = law_from_results(args.fit) if args.fit else LAWS[args.law]
    best = compute_optimal(law, args.budget)
    seconds = gpu_seconds(args.budget, peak, args.mfu)
    source = f"the fit in {args.fit}" if args.fit else f"the {args.law} law"
    return best | {"law": source, "gpu": spec.name, "dtype": args.dtype, "peak": peak, "mfu": args.mfu,
                   "gpu_hours": seconds / 3600, "dollars": seconds / 3600 * bill.GPU_HOUR_PRICE}  # fmt: skip


def _cmd_scale(args) -> int:
    a = _scale_answer(args)
    if args.json:
        print(json.dumps(a, indent=2))
        return 0
    hours = a["gpu_hours"]
    print(f"budget {a['budget']:.3g} FLOPs, {a['law']}; compute-optimal under C = 6 N D:")
    print(f"  N = {a['N']:.3g} parameters, D = {a['D']:.3g} tokens ({a['tokens_per_param']:.1f} tokens per parameter)")
    print(f"  predicted loss {a['loss']:.3f} nats per token (in the units of the law's own data and tokenizer)")
    print(
        f"  one {a['gpu']} at {a['mfu']:.0%} MFU of its {a['peak'] / 1e12:,.0f} TFLOP/s {a['dtype']} peak: "
        f"{hours:,.3g} GPU-hours ({hours / 24:,.3g} days), ${a['dollars']:,.0f} at $2 per GPU-hour"
    )
    return 0


def _add_scale(sub) -> None:
    p = sub.add_parser(
        "scale",
        help="compute-optimal N, D, loss and GPU time for a FLOP budget (chapter 14)",
        description="Chinchilla's answer for a compute budget: the model size and tokens that minimize the loss "
        "under C = 6ND, the loss the law predicts, and the time on a GPU at an assumed MFU.",
    )
    p.add_argument("--budget", type=_finite_float, required=True, help="training FLOPs, e.g. 1e21")
    p.add_argument("--fit", default=None, help="a results JSON of make record-scaling (its parametric law)")
    p.add_argument(
        "--law",
        default="chinchilla",
        choices=_names("gputrain.scaling.laws", "LAWS"),
        help="a published law when no --fit is given (default: chinchilla, Hoffmann et al. 2022)",
    )
    p.add_argument("--gpu", default="H100", help="a GPU of gputrain.device.GPU_SPECS (default: H100)")
    p.add_argument("--dtype", default="bf16", help="the peak to use: bf16 (default), fp8, tf32, ...")
    p.add_argument("--mfu", type=_finite_float, default=0.4, help="assumed model FLOPs utilization (default: 0.4)")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(func=_cmd_scale)
