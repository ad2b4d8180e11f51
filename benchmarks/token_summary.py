"""What torchtitan logs of a training run, from a --perf-json file's token rows: tokens/s per
device, MFU and peak memory, one line a burst; a mixture of experts' router balance and expert
path beside them; a tensor-parallel burst's TP degree, the share of a step its collectives took,
its scaling efficiency against one device (where a scaling case judged it) and each rank's peak.

    python benchmarks/token_summary.py results.json
"""

from __future__ import annotations

import json
import sys


def lines(results: dict) -> list[str]:
    out = []
    for row in results.get("results", []):
        if row.get("tokens_per_sec") is None:
            continue  # an image model's row, or a burst that measured nothing
        devices = row.get("world_size") or 1
        mfu = row.get("mfu")
        peak = row.get("peak_memory_bytes")
        out.append(
            f"{row['framework']} {row['model']} seq {row['seq_len']} batch {row['batch_size']}/"
            f"{'device' if (row.get('tp') or 1) == 1 else 'TP group'} "
            f"{row['precision']} on {devices} {row['device_kind']}: "
            f"{row['tokens_per_sec'] / devices:,.0f} tokens/s per device, "
            f"MFU {'-' if mfu is None else f'{mfu:.1%}'}"
            + (f" ({row['mfu_note']})" if row.get("mfu_note") else "")
            + f", peak memory {'-' if not peak else f'{peak / 2**30:.2f} GiB'}"
            + (
                f", router balance {row['router_balance']:.2f} ({row.get('expert_kernel')})"
                if row.get("router_balance") is not None
                else ""
            )
            + _tensor_parallel(row)
        )
    return out


def _tensor_parallel(row: dict) -> str:
    """A TP burst's figures: its degree, its collectives' share of a step, its scaling efficiency and
    each rank's peak memory; nothing for a burst without TP."""
    if (row.get("tp") or 1) == 1:
        return ""
    share, efficiency = row.get("tp_collective_share"), row.get("scaling_efficiency")
    peaks = "/".join(f"{r['peak_memory_bytes'] / 2**30:.2f}" for r in row.get("per_rank") or [])
    return (
        f", TP {row['tp']}: collectives {'-' if share is None else f'{share:.1%}'} of a step"
        + ("" if efficiency is None else f", scaling efficiency {efficiency:.1%}")
        + (f", peak memory per rank {peaks} GiB" if peaks else "")
    )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        found = lines(json.load(f))
    print("\n".join(found) if found else "no token model's burst in the results")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
