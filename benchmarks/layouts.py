"""Which memory layout trains each torch image model faster on this CPU, per precision: suite bursts
in NCHW (contiguous) and NHWC (channels_last), in alternating pairs.

The suite's default layout for a device kind and precision (``default_memory_format`` in
perfsuite/contract/spec.py) is the one these figures find faster; docs/figures.md keeps them.

    python benchmarks/layouts.py --model resnet50 --model vgg16 --precision fp32 --precision bf16
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from perfsuite.analysis.stats import median, median_ci
from perfsuite.contract.spec import BurstSpec
from perfsuite.models.registry import get_model
from perfsuite.plugin.launch import run_burst

LAYOUTS = ("channels_first", "channels_last")


def burst(model: str, precision: str, layout: str, batch: int | None, threads: int, steps: int) -> float:
    info = get_model("torch", model)
    spec = BurstSpec(
        framework="torch",
        model=model,
        batch_size=batch or info.cpu_batch_size,
        image_size=info.image_size or 224,
        precision=precision,
        memory_format=layout,
        warmup_steps=2,
        steps=steps,
        windows=5,
        threads=threads,
    )
    with tempfile.TemporaryDirectory() as tmp:
        return median(run_burst(spec, info, Path(tmp)).samples)


def compare(model: str, precision: str, batch: int | None, threads: int, steps: int, pairs: int) -> dict:
    """``pairs`` alternating pairs (each layout runs first in turn, so a drift of the machine's
    speed adds to half the ratios and takes from the others): channels_last over contiguous."""
    ratios, figures = [], {layout: [] for layout in LAYOUTS}
    for i in range(pairs):
        order = LAYOUTS if i % 2 == 0 else LAYOUTS[::-1]
        got = {layout: burst(model, precision, layout, batch, threads, steps) for layout in order}
        for layout in LAYOUTS:
            figures[layout].append(got[layout])
        ratios.append(got["channels_last"] / got["channels_first"])
    lo, hi = median_ci(ratios) if len(ratios) > 1 else (ratios[0], ratios[0])
    return {
        "model": model,
        "precision": precision,
        "contiguous": median(figures["channels_first"]),
        "channels_last": median(figures["channels_last"]),
        "ratio": median(ratios),
        "ratio_low": lo,
        "ratio_high": hi,
        "ratios": ratios,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", action="append", required=True)
    p.add_argument("--precision", action="append", default=None)
    p.add_argument("--batch-size", type=int, default=None, help="default: the model's per CPU worker")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--pairs", type=int, default=4)
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    a = p.parse_args()
    rows = []
    print(f"{'model':<11} {'precision':<9} {'contiguous':>10} {'channels_last':>13} {'ratio':>6}  interval")
    for model in a.model:
        for precision in a.precision or ["fp32", "bf16"]:
            r = compare(model, precision, a.batch_size, a.threads, a.steps, a.pairs)
            rows.append(r)
            print(
                f"{model:<11} {precision:<9} {r['contiguous']:>10.2f} {r['channels_last']:>13.2f} {r['ratio']:>6.3f}"
                f"  {r['ratio_low']:.3f}-{r['ratio_high']:.3f}",
                flush=True,
            )
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
