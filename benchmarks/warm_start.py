"""What a warm start would save a burst: a fresh interpreter that imports the framework, against a
child forked from an interpreter that imported it already.

    .venv/bin/python benchmarks/warm_start.py [--repeats 5] [--json FILE]

For torch and TensorFlow, each ``--repeats`` times: (a) ``python -c "import FRAMEWORK; <op>"`` in a
fresh process, timed from the start of the process to its exit; (b) ``os.fork()`` of this
process, after it imported the framework once, the child running the same op and exiting,
timed from the fork to the child's exit. The op is a small training step's first touch of the
framework (torch: a matmul and its gradient; TensorFlow: a ``tf.function`` traced and run), so
a framework that cannot run in a forked child (a thread pool started at import, a lock held
across the fork) shows as a child that fails or hangs: each child has 60 s.

The figures are the candidate's ceiling for ``make perf``'s slice: its 8 bursts spend 15.8 s
importing their framework (docs/figures.md, "Where a burst's time goes").
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

OPS = {
    "torch": (
        "import torch",
        "x = torch.randn(64, 64, requires_grad=True); (x @ x).sum().backward(); assert x.grad is not None",
    ),
    "tensorflow": (
        "import os; os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2'); import tensorflow as tf",
        "f = tf.function(lambda x: tf.reduce_sum(tf.matmul(x, x))); assert float(f(tf.ones((64, 64)))) > 0",
    ),
}
CHILD_TIMEOUT_S = 60.0


def fresh(imports: str, op: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"{imports}\n{op}"], check=True, timeout=CHILD_TIMEOUT_S)
    return time.perf_counter() - started


def forked(op: str) -> float | str:
    """Seconds from the fork to the child's exit, or what went wrong."""
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: the op, then out without the parent's teardown
        try:
            exec(op, {"torch": sys.modules.get("torch"), "tf": sys.modules.get("tensorflow")})
        except BaseException:  # noqa: BLE001 - the parent reports the exit code
            os._exit(1)
        os._exit(0)
    deadline = started + CHILD_TIMEOUT_S
    while time.perf_counter() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            return time.perf_counter() - started if code == 0 else f"child exited with {code}"
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return f"child hung for {CHILD_TIMEOUT_S:.0f} s"


def measure(name: str, repeats: int) -> dict:
    imports, op = OPS[name]
    cold = [fresh(imports, op) for _ in range(repeats)]
    exec(imports, {})  # this process imports it once, as a warm-start server would
    warm = [forked(op) for _ in range(repeats)]
    ok = [w for w in warm if isinstance(w, float)]
    return {
        "framework": name,
        "fresh_s": cold,
        "forked_s": warm,
        "fresh_median_s": statistics.median(cold),
        "forked_median_s": statistics.median(ok) if ok else None,
        "forked_failures": [w for w in warm if not isinstance(w, float)],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--only", choices=sorted(OPS), help=argparse.SUPPRESS)  # one framework, in this process
    args = p.parse_args(argv)
    if args.only:
        print(json.dumps(measure(args.only, args.repeats)))
        return 0
    out: dict = {"load_before": os.getloadavg(), "python": sys.version.split()[0], "results": []}
    # Each framework in a process of its own: the second import must not find the first's threads.
    for name in OPS:
        cmd = [sys.executable, __file__, "--only", name, "--repeats", str(args.repeats)]
        child = subprocess.run(cmd, capture_output=True, text=True, check=False)
        last = child.stdout.strip().splitlines()[-1:] if child.returncode == 0 else []
        out["results"].append(json.loads(last[0]) if last else {"framework": name, "error": child.stderr[-2000:]})
    out["load_after"] = os.getloadavg()
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
