"""Parity with the peer harnesses: perfsuite's burst against tf_cnn_benchmarks, timm's benchmark.py,
Hugging Face transformers and keras_hub.

Same model, batch, thread count, precision, optimizer, synthetic data resident on the device,
warm-up excluded; perfsuite's figure (the median window of a burst, as the gate reads it) over the
peer's (its own "total images/sec" / "samples_per_sec"; a plain loop's tokens over its timed
steps' seconds), in alternating pairs, the median ratio with its distribution-free 95% interval.
The image models train with SGD and momentum 0.9; GPT-2 with AdamW (``gpt2_peers.py``: its peers
are transformers' ``GPT2LMHeadModel`` in torch and keras_hub's ``GPT2Backbone`` in TensorFlow).

    python benchmarks/peer_parity.py                          # resnet50, both frameworks, 6 pairs
    python benchmarks/peer_parity.py --framework tf --models resnet50,inception3 --pairs 4
    python benchmarks/peer_parity.py --models gpt2 --precision fp32,bf16 --batch-size 2 --seq-len 128 \
        --pairs 4 --steps 8 --windows 4 --warmup-steps 2 --interleaved

The peers run from an environment of their own beside perfsuite's (never inside it), made on
first use under ``$PERFSUITE_PEERS`` (default ``~/.cache/perfsuite-peers``) with the same torch,
TensorFlow and numpy versions as the interpreter running this script: tf_keras for
tf_cnn_benchmarks (``TF_USE_LEGACY_KERAS=1``), timm and torchvision (no dependencies: the
registry's torchvision for this torch is the CUDA build, which imports on CPU torch once the
``torchvision::nms`` / ``qnms`` op schemas are declared, see ``SHIM``), transformers (which
brings no torch of its own) and keras_hub (without its tokenizers' tensorflow-text, which
would pull the full tensorflow package over tensorflow-cpu). Neither peer script
ships in a package: both come from their repositories at a pinned commit, cloned from GitHub
or archived from a local git directory given with ``--source NAME=GITDIR``. Nothing of the
peers is patched.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from gpt2_peers import GPT2_BASE_EN, KERAS_HUB_LOOP, TF_INTERLEAVED, TORCH_INTERLEAVED, TRANSFORMERS_LOOP

from perfsuite.analysis.stats import median, median_ci

# The peers' sources, pinned: (repository, commit, the path inside it that is needed).
SOURCES = {
    "benchmarks": (
        "https://github.com/tensorflow/benchmarks",
        "8fb79079265933ad39bea628b777af662f5bf15d",
        "scripts/tf_cnn_benchmarks",
    ),
    "timm": (
        "https://github.com/huggingface/pytorch-image-models",
        "8ef73809f622e0031bd7f4940265734aef8b9978",  # tag v1.0.28, the timm release installed below
        "benchmark.py",
    ),
}
TIMM = "1.0.28"
# The token models' peers: Hugging Face transformers (torch) and keras_hub (Keras 3 on TensorFlow).
TRANSFORMERS = "5.23.0"
KERAS_HUB = "0.32.0"
# torchvision's release for each torch minor version.
TORCHVISION = {"2.11": "0.26.0", "2.12": "0.27.0", "2.13": "0.28.0", "2.14": "0.29.0"}

# What each peer calls a perfsuite model; a model a peer lacks is not compared with it.
TF_CNN_NAMES = {name: name for name in ("resnet50", "resnet152", "inception3", "inception4")}
TIMM_NAMES = {**TF_CNN_NAMES, "inception3": "inception_v3", "inception4": "inception_v4"}

# torchvision's CUDA build registers fake kernels for its C++ ops at import; on a CPU torch
# without its library those ops do not exist. Declaring their schemas is enough to import it.
SHIM = """\
import torch.library
_lib = torch.library.Library("torchvision", "DEF")
_lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
_lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
"""


def peers_dir() -> Path:
    return Path(os.environ.get("PERFSUITE_PEERS", Path.home() / ".cache" / "perfsuite-peers"))


def _version(dist: str) -> str:
    return md.version(dist)


def peer_python() -> Path:
    """The peers' interpreter, its environment made (once per set of versions) if missing."""
    torch_v, tf_v = _version("torch"), _version("tensorflow-cpu")
    minor = ".".join(torch_v.split("+")[0].split(".")[:2])
    tf_minor = ".".join(tf_v.split(".")[:2])
    wanted = [
        f"torch=={torch_v}",
        f"tensorflow-cpu=={tf_v}",
        f"numpy=={_version('numpy')}",
        "pyyaml",
        "huggingface_hub",
        "safetensors",
        "pillow",  # torchvision's
        f"transformers=={TRANSFORMERS}",  # needs no torch of its own: the one above is kept
        f"keras=={_version('keras')}",  # perfsuite's Keras 3, which keras_hub builds on
        # keras_hub's own requirements, less tensorflow-text (which pulls the full tensorflow
        # package over tensorflow-cpu; only its tokenizers need it) and kagglehub (the preset
        # downloads: nothing here loads a preset)
        "absl-py",
        "packaging",
        "regex",
        "rich",
        "sentencepiece",
        "tokenizers",
    ]
    # tf_keras without its one requirement, the full tensorflow package: that is another build of
    # TensorFlow (CUDA's) and would replace tensorflow-cpu's files, the build perfsuite runs.
    no_deps = [
        f"timm=={TIMM}",
        f"torchvision=={TORCHVISION[minor]}",
        f"keras-hub=={KERAS_HUB}",
        f"tf_keras~={tf_minor}.0",
    ]
    venv = peers_dir() / "venv"
    python = venv / "bin" / "python"
    stamp = venv / "perfsuite-peers.json"
    want = {"deps": wanted, "no_deps": no_deps}
    if stamp.exists() and json.loads(stamp.read_text()) == want:
        return python
    print(f"making the peers' environment in {venv} ...", flush=True)
    if venv.exists():  # made for other versions: anew, so nothing of them is left behind
        shutil.rmtree(venv)
    if not python.exists():
        subprocess.run([sys._base_executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, *wanted], check=True)
    subprocess.run([*pip, "--no-deps", *no_deps], check=True)
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "perfsuite_peer_shim.py").write_text(SHIM)
    (site / "perfsuite_peer_shim.pth").write_text("import perfsuite_peer_shim\n")
    stamp.write_text(json.dumps(want))
    return python


def peer_source(name: str, local: dict[str, str]) -> Path:
    """The pinned path of a peer's repository, archived once into the cache."""
    url, commit, path = SOURCES[name]
    target = peers_dir() / "src" / f"{name}-{commit[:12]}"
    if (target / path).exists():
        return target / path
    gitdir = local.get(name)
    with tempfile.TemporaryDirectory() as tmp:
        if gitdir is None:
            gitdir = str(Path(tmp) / "clone")
            subprocess.run(["git", "clone", "--quiet", "--filter=blob:none", url, gitdir], check=True)
        archive = subprocess.run(
            ["git", f"--git-dir={_git_dir(gitdir)}", "archive", commit, path], capture_output=True, check=True
        ).stdout
        target.mkdir(parents=True, exist_ok=True)
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target / path


def _git_dir(path: str) -> str:
    return str(Path(path) / ".git") if (Path(path) / ".git").exists() else path


def _run(cmd: list[str], env: dict, cwd: Path | None = None) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    if out.returncode != 0:
        sys.stderr.write(out.stdout[-4000:] + out.stderr[-4000:])
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return out.stdout + out.stderr


def _clean_env(threads: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    return dict(env, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS=str(threads), TF_CPP_MIN_LOG_LEVEL="1")


def tf_cnn_benchmarks(python: Path, src: Path, model: str, a) -> float:
    env = dict(_clean_env(a.threads), TF_USE_LEGACY_KERAS="1")
    cmd = [
        str(python),
        "tf_cnn_benchmarks.py",
        f"--model={TF_CNN_NAMES[model]}",
        f"--batch_size={a.batch_size}",
        f"--num_batches={a.steps}",
        f"--num_warmup_batches={a.warmup_steps}",
        "--device=cpu",
        "--data_format=NHWC",
        f"--num_intra_threads={a.threads}",
        "--num_inter_threads=1",
        "--optimizer=momentum",  # momentum 0.9, as perfsuite's SGD
        "--weight_decay=0",  # perfsuite's step has no L2 term
        f"--display_every={a.steps}",
    ]
    out = _run(cmd, env, cwd=src)
    return float(re.findall(r"total images/sec: ([0-9.]+)", out)[-1])


def timm_benchmark(python: Path, script: Path, model: str, a, image_size: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results.json"
        cmd = [
            str(python),
            str(script),
            f"--model={TIMM_NAMES[model]}",
            "--bench=train",
            "--device=cpu",
            f"--batch-size={a.batch_size}",
            f"--img-size={image_size}",  # its default for resnet50 is the 288 px test size
            f"--num-warm-iter={a.warmup_steps}",
            f"--num-bench-iter={a.steps}",
            "--opt=momentum",  # plain SGD with momentum 0.9, as perfsuite's
            "--weight-decay=0",
            "--no-retry",
            "--results-format=json",
            f"--results-file={results}",
        ]
        _run(cmd, _clean_env(a.threads))
        data = json.loads(results.read_text())
    rows = data if isinstance(data, list) else [data]
    return float(rows[0]["train_samples_per_sec"])


def perfsuite_burst(framework: str, model: str, a, precision: str = "fp32") -> float:
    """The suite's own figure: the median window of a burst run by its launcher (img/s, or a
    token model's tokens/s at ``--seq-len``)."""
    from perfsuite.contract.spec import BurstSpec
    from perfsuite.models.registry import get_model
    from perfsuite.plugin.launch import run_burst

    info = get_model(framework, model)
    # timm's benchmark.py and tf_cnn_benchmarks (NHWC) train in the framework's layout without
    # flags: torch's CNNs are held to NCHW here, whatever the suite's measured default is.
    shape = (
        {"seq_len": a.seq_len}
        if info.workload == "token"
        else {"image_size": info.image_size, "memory_format": "channels_first" if framework == "torch" else ""}
    )
    spec = BurstSpec(
        framework=framework,
        model=model,
        device_kind="cpu",
        devices=1,
        batch_size=a.batch_size,
        **shape,
        warmup_steps=a.warmup_steps,
        steps=a.steps,
        windows=a.windows,
        threads=a.threads,
        precision=precision,
    )
    with tempfile.TemporaryDirectory() as tmp:
        record = run_burst(spec, info, Path(tmp))
    return median(record.samples)


# One process, the two models' training steps interleaved one for one: contention from other
# work on the machine falls on both alike, which alternating whole runs cannot promise.
INTERLEAVED = r"""
import json, sys, time, timm, torch
import torch.nn.functional as F
from perfsuite.models.registry import get_model, resolve_builder
name, peer_name, batch, threads, warmup, steps = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
torch.set_num_threads(threads)
torch.manual_seed(0)
info = get_model("torch", name)
models = {"perfsuite": resolve_builder(info)(num_classes=info.num_classes),
          "timm": timm.create_model(peer_name, num_classes=info.num_classes)}
x = torch.randn(batch, 3, info.image_size, info.image_size)
y = torch.randint(0, info.num_classes, (batch,))
steps_of = {}
for key, model in models.items():
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    def step(model=model, opt=opt):
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    steps_of[key] = step
times = {key: [] for key in models}
for i in range(warmup + steps):
    for key in (("perfsuite", "timm") if i % 2 == 0 else ("timm", "perfsuite")):
        t = time.perf_counter()
        steps_of[key]()
        if i >= warmup:
            times[key].append(time.perf_counter() - t)
print(json.dumps(times))
"""


def interleaved(python: Path, model: str, a) -> dict:
    """perfsuite's and timm's torch model, steps interleaved in one process of the peers'
    environment (perfsuite's source on its path): the ratio of the step times, pair by pair."""
    env = dict(_clean_env(a.threads), PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    cmd = [str(python), "-c", INTERLEAVED, model, TIMM_NAMES[model], str(a.batch_size), str(a.threads)]
    times = json.loads(_run([*cmd, str(a.warmup_steps), str(a.steps)], env).strip().splitlines()[-1])
    ratios = [q / p for p, q in zip(times["perfsuite"], times["timm"])]  # speed ratio: peer time / ours
    lo, hi = median_ci(ratios)
    print(
        f"\ntorch {model} vs timm's model, steps interleaved in one process: median speed ratio "
        f"{median(ratios):.3f} (95% interval {lo:.3f} to {hi:.3f} over {len(ratios)} step pairs)",
        flush=True,
    )
    return {
        "label": f"torch {model} vs timm model, interleaved steps",
        "ratio": median(ratios),
        "ratio_ci95": [lo, hi],
        "step_pairs": len(ratios),
    }


def _peer_env(a) -> dict:
    """The peers' environment for GPT-2's scripts, perfsuite's source on the path (the
    interleaved scripts build perfsuite's side from it; the plain loops import none of it)."""
    return dict(_clean_env(a.threads), PYTHONPATH=str(Path(__file__).resolve().parents[1]))


def _shape(a) -> list[str]:
    return [str(a.batch_size), str(a.seq_len), str(a.threads), str(a.warmup_steps), str(a.steps)]


def _last_json(out: str) -> dict:
    """The script's result: its last line that is a JSON object (its warnings may follow it)."""
    return json.loads(next(line for line in reversed(out.splitlines()) if line.startswith("{")))


def transformers_gpt2(python: Path, a, precision: str) -> float:
    """transformers' GPT2LMHeadModel in a plain loop: tokens over the timed steps' seconds."""
    found = _last_json(_run([str(python), "-c", TRANSFORMERS_LOOP, *_shape(a), precision], _peer_env(a)))
    if found["attention"] != "sdpa":
        print(f"note: transformers' GPT-2 ran {found['attention']!r} attention, not sdpa", flush=True)
    return a.batch_size * a.seq_len * len(found["step_s"]) / sum(found["step_s"])


def keras_hub_gpt2(python: Path, a, precision: str) -> float:
    """keras_hub's GPT2Backbone with its tied head in a plain tf.function loop: tokens/s."""
    found = _last_json(
        _run([str(python), "-c", KERAS_HUB_LOOP, *_shape(a), precision, json.dumps(GPT2_BASE_EN)], _peer_env(a))
    )
    return a.batch_size * a.seq_len * len(found["step_s"]) / sum(found["step_s"])


def gpt2_interleaved(python: Path, framework: str, a, precision: str) -> dict:
    """perfsuite's GPT-2 step (the burst worker's own pieces) and the peer's plain step alternating
    in one process: the ratio of step times per step pair; with ``--profile`` each side's op table."""
    script, peer = (TORCH_INTERLEAVED, "transformers") if framework == "torch" else (TF_INTERLEAVED, "keras_hub")
    extra = [json.dumps(GPT2_BASE_EN)] if framework == "tf" else []
    found = _last_json(_run([str(python), "-c", script, *_shape(a), precision, str(a.profile), *extra], _peer_env(a)))
    times = found["times"]
    ratios = [q / p for p, q in zip(times["perfsuite"], times["peer"])]  # speed ratio: peer time / ours
    lo, hi = median_ci(ratios)
    tokens = a.batch_size * a.seq_len
    ours, theirs = tokens / median(times["perfsuite"]), tokens / median(times["peer"])
    label = f"{framework} gpt2 {precision} vs {peer}'s model, interleaved steps"
    print(
        f"\n{label}: median speed ratio {median(ratios):.3f} (95% interval {lo:.3f} to {hi:.3f} over "
        f"{len(ratios)} step pairs); median step {ours:.1f} vs {theirs:.1f} tokens/s",
        flush=True,
    )
    for side, profile in found.get("profiles", {}).items():
        print_profile(f"{framework} gpt2 {precision}, {side}", profile)
    return {
        "label": label,
        "ratio": median(ratios),
        "ratio_ci95": [lo, hi],
        "step_pairs": len(ratios),
        "perfsuite_tokens_s": ours,
        "peer_tokens_s": theirs,
        "profiles": found.get("profiles", {}),
    }


def print_profile(label: str, profile: dict, rows: int = 18) -> None:
    """An op table (the worker's OpProfile): each op's mean self time per profiled step."""
    steps = profile["step_ms"]
    print(f"\n{label}: {len(steps)} profiled steps, {median(steps):.0f} ms a step (profiler on)")
    ops = sorted(profile["ops"], key=lambda o: -sum(o["ms"]) / len(o["ms"]))
    for op in ops[:rows]:
        print(f"  {sum(op['ms']) / len(op['ms']):>9.1f} ms  {op['calls']:>6.0f} calls  {op['name']}")


def pairs(label: str, ours: Callable[[], float], peer: Callable[[], float], count: int, unit: str = "img/s") -> dict:
    """``count`` pairs, alternating which runs first; one row each, then the summary. Each row
    has the 1-minute load average before and after its pair (others' work shares the cores)."""
    print(
        f"\n{label}\n{'pair':>4}  {'first':>9}  {'perfsuite':>9}  {'peer':>9}  {'ratio':>6}  load before, after",
        flush=True,
    )
    rows, loads = [], []
    for i in range(count):
        before = os.getloadavg()[0]
        if i % 2 == 0:
            p, q = ours(), peer()
        else:
            q = peer()
            p = ours()
        rows.append((p, q))
        loads.append((before, os.getloadavg()[0]))
        first = "perfsuite" if i % 2 == 0 else "peer"
        print(
            f"{i + 1:>4}  {first:>9}  {p:>9.3f}  {q:>9.3f}  {p / q:>6.3f}  {before:.2f}, {loads[-1][1]:.2f}", flush=True
        )
    ratios = [p / q for p, q in rows]
    lo, hi = median_ci(ratios)
    summary = {
        "label": label,
        "pairs": count,
        "unit": unit,
        "perfsuite": median([p for p, _ in rows]),
        "peer": median([q for _, q in rows]),
        "ratio": median(ratios),
        "ratio_ci95": [lo, hi],
        "ratios": ratios,
        # On a machine others share, each side's fastest run is its least disturbed one.
        "best_ratio": max(p for p, _ in rows) / max(q for _, q in rows),
        "load_1min": [min(min(x) for x in loads), max(max(x) for x in loads)],
    }
    print(
        f"median perfsuite/peer {summary['ratio']:.3f} (95% interval {lo:.3f} to {hi:.3f} over {count} pairs; "
        f"range {min(ratios):.3f} to {max(ratios):.3f}); {unit} {summary['perfsuite']:.2f} vs "
        f"{summary['peer']:.2f}; fastest run over fastest run {summary['best_ratio']:.3f}; "
        f"load average {summary['load_1min'][0]:.2f} to {summary['load_1min'][1]:.2f}",
        flush=True,
    )
    return summary


def gpt2_pairs(python: Path, framework: str, a, precisions: list[str]) -> list[dict]:
    """perfsuite's gpt2 bursts against the peer's plain loop, per precision, in pairs."""
    peer_of = {"torch": ("transformers", transformers_gpt2), "tf": ("keras_hub", keras_hub_gpt2)}
    name, peer = peer_of[framework]
    return [
        pairs(
            f"{framework} gpt2 {precision} vs {name}",
            lambda p=precision: perfsuite_burst(framework, "gpt2", a, p),
            lambda p=precision: peer(python, a, p),
            a.pairs,
            unit="tokens/s",
        )
        for precision in precisions
    ]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--framework", choices=("tf", "torch", "both"), default="both")
    p.add_argument("--models", default="resnet50", help="comma-separated perfsuite model names")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup-steps", type=int, default=3)
    p.add_argument("--steps", type=int, default=12, help="timed steps of each run")
    p.add_argument("--windows", type=int, default=4, help="perfsuite's windows over those steps")
    p.add_argument("--pairs", type=int, default=6, help="0: none (with --interleaved: that alone)")
    p.add_argument("--source", action="append", default=[], help="NAME=GITDIR: a local clone of a peer's repo")
    p.add_argument("--json", type=Path, help="write the summaries here")
    p.add_argument(
        "--interleaved", action="store_true", help="also time the two models step by step (torch; gpt2: both)"
    )
    p.add_argument("--precision", default="fp32", help="gpt2: comma-separated, fp32 and/or bf16 (autocast)")
    p.add_argument("--seq-len", type=int, default=128, help="a token model's sequence length")
    p.add_argument("--profile", type=int, default=0, help="gpt2 --interleaved: op tables of N steps a side")
    p.add_argument("--setup-only", action="store_true", help="make the peers' environment and sources, then stop")
    a = p.parse_args()
    if a.steps < 5 or a.steps % a.windows:
        p.error("--steps: at least 5 (timm logs every steps // 5), a multiple of --windows")
    local = dict(s.split("=", 1) for s in a.source)

    python = peer_python()
    frameworks = ("tf", "torch") if a.framework == "both" else (a.framework,)
    models = a.models.split(",")
    # The image models' peer scripts come from their repositories; GPT-2's peers are packages.
    tf_src = peer_source("benchmarks", local) if "tf" in frameworks and set(models) & set(TF_CNN_NAMES) else None
    timm_script = peer_source("timm", local) if "torch" in frameworks and set(models) & set(TIMM_NAMES) else None
    if a.setup_only:
        print(f"peers ready: {python}, {tf_src}, {timm_script}")
        return 0

    from perfsuite.models.registry import get_model

    precisions = a.precision.split(",")
    if "gpt2" not in models and precisions != ["fp32"]:
        p.error("--precision: the image models' peers run fp32 only")
    print(
        f"batch {a.batch_size}{f' x {a.seq_len} tokens (gpt2)' if 'gpt2' in models else ''}, {a.threads} "
        f"threads, {'/'.join(precisions)}, synthetic data, {a.warmup_steps} warm-up + {a.steps} timed steps "
        f"a run, {a.pairs} alternating pairs; load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    summaries = []
    for model in models if a.pairs > 0 else []:
        for framework in frameworks:
            if model == "gpt2":
                summaries += gpt2_pairs(python, framework, a, precisions)
                continue
            if framework == "tf" and model in TF_CNN_NAMES:
                peer, name = (lambda m=model: tf_cnn_benchmarks(python, tf_src, m, a)), "tf_cnn_benchmarks"
            elif framework == "torch" and model in TIMM_NAMES:
                size = get_model("torch", model).image_size
                peer, name = (lambda m=model, s=size: timm_benchmark(python, timm_script, m, a, s)), "timm"
            else:
                print(f"\n{framework} {model}: no peer runs this model; skipped")
                continue
            summaries.append(
                pairs(
                    f"{framework} {model} vs {name}",
                    lambda f=framework, m=model: perfsuite_burst(f, m, a),
                    peer,
                    a.pairs,
                )
            )
    if a.interleaved and "torch" in frameworks:
        summaries += [interleaved(python, m, a) for m in models if m in TIMM_NAMES]
    if a.interleaved and "gpt2" in models:
        for framework in frameworks:
            for precision in precisions:
                before = os.getloadavg()[0]
                summaries.append(gpt2_interleaved(python, framework, a, precision))
                summaries[-1]["load_1min"] = [before, os.getloadavg()[0]]
                print(f"load average {before:.2f} before, {os.getloadavg()[0]:.2f} after", flush=True)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}", flush=True)
    if a.json:
        a.json.write_text(json.dumps(summaries, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
