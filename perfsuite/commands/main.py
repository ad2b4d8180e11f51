"""``python -m perfsuite``: look at this machine, the model registry and baseline files without running pytest."""

from __future__ import annotations

import argparse
import json
import sys

from perfsuite.commands import CommandError, baseline, bisect, history, triage
from perfsuite.common import hardware
from perfsuite.common.text import columns
from perfsuite.models.registry import FRAMEWORKS, all_models, load_file


def _fingerprint(args: argparse.Namespace) -> int:
    fps = [hardware.cpu_fingerprint()]
    gpu = hardware.gpu_fingerprint()
    if gpu is not None:
        fps.append(gpu)
    if args.json:
        print(json.dumps([dict(fp.as_dict(), id=fp.id) for fp in fps], indent=1))
    else:
        for fp in fps:
            print(f"{fp.kind}: {hardware.describe(fp)}")
            print(f"  baseline file: {fp.id}.json")
    return 0


def _models(args: argparse.Namespace) -> int:
    for path in args.load or ():
        load_file(path)
    models = all_models(args.framework)
    if args.json:
        print(json.dumps([m.as_dict() for m in models], indent=1))
        return 0
    header = ("name", "framework", "workload", "params", "input", "batch/device", "batch/cpu worker", "training GFLOPs")
    rows = [
        (
            m.name,
            m.framework,
            m.workload,
            f"{m.params / 1e6:.1f}M" if m.params else "-",
            _input(m),
            str(m.batch_size),
            str(m.cpu_batch_size),
            _training_flops(m),
        )
        for m in models
    ]
    for line in columns(header, rows, left=(0, 1, 2, 4)):
        print(line)
    return 0


def _input(m) -> str:
    """'224 px', or a token model's sequence lengths and vocabulary: '1024 tokens (128 on a CPU worker) of 50257'."""
    return m.workload_kind.describe_input(m)


def _training_flops(m) -> str:
    """Forward and backward GFLOPs per image, or per token at the default sequence length."""
    per_item = m.train_flops_per_item()
    return "-" if per_item is None else f"{per_item / 1e9:.2f}/{m.workload_kind.item}"


class _Parser(argparse.ArgumentParser):
    """Usage mistakes as one ``error:`` line and exit code 2; other errors are one such line and exit code 1."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (see --help)\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m perfsuite", description=__doc__.split("``: ")[1])
    sub = p.add_subparsers(dest="command", required=True)
    fp = sub.add_parser("fingerprint", help="print this machine's hardware fingerprint(s)")
    fp.add_argument("--json", action="store_true", help="machine-readable output")
    fp.set_defaults(run=_fingerprint)
    models = sub.add_parser("models", help="list the registered models")
    models.add_argument("--framework", choices=FRAMEWORKS, help="only this framework's models")
    models.add_argument(
        "--load",
        action="append",
        metavar="FILE",
        help="a conftest.py or module that registers models of your own (repeatable)",
    )
    models.add_argument("--json", action="store_true", help="machine-readable output")
    models.set_defaults(run=_models)
    baseline.add_parser(sub)
    history.add_parser(sub)
    bisect.add_parser(sub)
    triage.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except BrokenPipeError:
        return 0
    except CommandError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - one line, no traceback, for any command
        print(f"error: python -m perfsuite {args.command}: {exc}", file=sys.stderr)
        return 1
