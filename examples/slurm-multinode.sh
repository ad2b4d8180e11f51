#!/bin/bash
# Multi-node performance suite under Slurm: one pytest per node, started by srun.
#
#   sbatch examples/slurm-multinode.sh                         # the whole GPU suite on 2 nodes
#   sbatch examples/slurm-multinode.sh --model resnet50        # extra arguments go to pytest
#   sbatch examples/slurm-multinode.sh --framework torch       # one framework only
#   SAVE_BASELINE=1 sbatch examples/slurm-multinode.sh         # refresh the baselines (node 0 writes them)
#
# Submit from the repository root, on a file system every node sees, with the virtual
# environment made there by `make setup` on a GPU node (or set PYTHON). Torch bursts meet
# through torchrun's c10d rendezvous on the first node (RDZV_PORT); TensorFlow gets every
# node's HOST:TF_PORT in rank order. Every node runs the same command, so every node
# collects the same cases in the same order; node 0 gates and saves, the other nodes run
# their ranks and pass. The job's exit code is the highest of the nodes': 1 = a failed
# gate or burst (see node 0's log), 4 = a usage error.
#
#SBATCH --job-name=perfsuite
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --time=04:00:00
#SBATCH --output=perfsuite-%j.out

set -euo pipefail

if [[ -z "${SLURM_JOB_ID:-}" ]]; then
    echo "error: run this through sbatch (no SLURM_JOB_ID)" >&2
    exit 2
fi

PYTHON=${PYTHON:-.venv/bin/python}
RDZV_PORT=${RDZV_PORT:-29500}
TF_PORT=${TF_PORT:-29600}
GPUS=${GPUS:-${SLURM_GPUS_PER_NODE:-}}
GPUS=${GPUS##*:}  # "8" or "h100:8" -> 8
LOG_DIR=${LOG_DIR:-perf-logs/$SLURM_JOB_ID}
if [[ ! "$GPUS" =~ ^[1-9][0-9]*$ ]]; then
    echo "error: GPUs per node unknown (got '$GPUS'): keep --gpus-per-node above or set GPUS" >&2
    exit 2
fi
if [[ ! -x "$PYTHON" ]]; then
    echo "error: no Python at $PYTHON: run 'make setup' on a GPU node first, or set PYTHON" >&2
    exit 2
fi

mapfile -t hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
head_host=${hosts[0]}
worker_hosts=$(for h in "${hosts[@]}"; do printf '%s:%s\n' "$h" "$TF_PORT"; done | paste -sd, -)

extra=()
if [[ -n "${SAVE_BASELINE:-}" && "${SAVE_BASELINE}" != 0 ]]; then
    extra+=(--save-baseline)
fi

mkdir -p "$LOG_DIR"
echo "nodes: ${hosts[*]}; rendezvous $head_host:$RDZV_PORT; TF workers $worker_hosts; logs in $LOG_DIR/"

# Exported for the per-node command below, which srun starts on every node.
export PERF_PYTHON=$PYTHON PERF_GPUS=$GPUS PERF_LOG_DIR=$LOG_DIR
export PERF_RDZV_ENDPOINT=$head_host:$RDZV_PORT PERF_WORKER_HOSTS=$worker_hosts

# One log per node (%n = node index, %N = host name); each node writes its own report
# folder. SLURM_NODEID is read on the node itself, hence the single quotes.
# shellcheck disable=SC2016
srun --nodes="$SLURM_NNODES" --ntasks-per-node=1 --kill-on-bad-exit=0 \
    --output="$LOG_DIR/node%n-%N.log" \
    bash -c '
        set -euo pipefail
        report="$PERF_LOG_DIR/node$SLURM_NODEID"
        exec "$PERF_PYTHON" -m pytest tests_perf -m "gpu and multinode" -rs \
            --gpus "$PERF_GPUS" \
            --nnodes "$SLURM_NNODES" --node-rank "$SLURM_NODEID" \
            --rdzv-endpoint "$PERF_RDZV_ENDPOINT" --worker-hosts "$PERF_WORKER_HOSTS" \
            --perf-report "$report" --junitxml "$report/junit.xml" "$@"
    ' node-command "${extra[@]}" "$@"
