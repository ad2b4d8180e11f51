#!/bin/bash
# Multi-node performance suite under Slurm: one pytest per node, started by srun.
#
#   sbatch examples/slurm-multinode.sh                              # the whole GPU suite on 2 nodes
#   sbatch examples/slurm-multinode.sh --perf-model resnet50        # extra arguments go to pytest
#   sbatch examples/slurm-multinode.sh --perf-framework torch       # one framework only
#   sbatch --nodes=4 examples/slurm-multinode.sh                    # 4 nodes
#   SAVE_BASELINE=1 sbatch examples/slurm-multinode.sh              # refresh the baselines (node 0 writes them)
#   CPU_WORKERS=1 sbatch --gpus-per-node=0 examples/slurm-multinode.sh   # CPU mode: no GPU needed
#
# Submit from the repository root, on a file system every node sees, with the virtual
# environment made there by `make setup` on a GPU node (or set PYTHON). Every node runs
# the same pytest command, so every node collects the same cases in the same order;
# node 0 gates and saves, the other nodes run their ranks and pass. The job's exit code
# is the highest of the nodes': 1 = a failed gate or burst (see node 0's log), 4 = a
# usage error, 2 = this script's own usage error.
#
# Where the nodes meet: torch bursts through torchrun's c10d rendezvous on the first
# node's address, port RDZV_PORT (default 29500); TensorFlow workers listen on every
# node's address, node k on port TF_PORT + k (default 29600 + k), so nodes that share an
# address still get ports of their own. Addresses are the nodes' NodeAddr in Slurm
# (`scontrol show node NAME`), not their names, which need not resolve.
#
# CPU mode (CPU_WORKERS=N): `-m "cpu and multinode" --perf-cpu-workers N` instead of
# `-m "gpu and multinode" --perf-gpus GPUS`, each node's CPU workers standing in for its
# GPUs; `--gpus-per-node=0` on the sbatch line overrides the GPU request below.
# TensorFlow's multi-node cases on CPU need CPU_WORKERS=1 (one replica per node).
#
# Settings, from the environment sbatch passes on:
#   PYTHON         the Python of the virtual environment (default .venv/bin/python)
#   GPUS           GPUs per node (default: the job's --gpus-per-node)
#   CPU_WORKERS    CPU mode, N CPU workers per node
#   RDZV_PORT, TF_PORT   see above
#   LOG_DIR        one log and one report folder per node (default perf-logs/JOB_ID):
#                  node0-HOST.log, node0/ (node 0's report, junit.xml), node1-HOST.log, ...
#   SAVE_BASELINE  1: --perf-save-baseline
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
LOG_DIR=${LOG_DIR:-perf-logs/$SLURM_JOB_ID}
CPU_WORKERS=${CPU_WORKERS:-}

if [[ -n "$CPU_WORKERS" ]]; then
    if [[ ! "$CPU_WORKERS" =~ ^[1-9][0-9]*$ ]]; then
        echo "error: CPU_WORKERS must be a positive number (got '$CPU_WORKERS')" >&2
        exit 2
    fi
    devices=(-m "cpu and multinode" --perf-cpu-workers "$CPU_WORKERS")
else
    GPUS=${GPUS:-${SLURM_GPUS_PER_NODE:-}}
    GPUS=${GPUS##*:} # "8" or "h100:8" -> 8
    if [[ ! "$GPUS" =~ ^[1-9][0-9]*$ ]]; then
        echo "error: GPUs per node unknown (got '$GPUS'): keep --gpus-per-node above or set GPUS," \
            "or set CPU_WORKERS=N for CPU mode" >&2
        exit 2
    fi
    devices=(-m "gpu and multinode" --perf-gpus "$GPUS")
fi
if [[ ! -x "$PYTHON" ]]; then
    echo "error: no Python at $PYTHON: run 'make setup' on a GPU node first, or set PYTHON" >&2
    exit 2
fi

# A node's address as Slurm knows it (NodeAddr; the node's name where none is set).
node_addr() {
    local addr
    addr=$(scontrol show node "$1" | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p')
    echo "${addr:-$1}"
}

mapfile -t hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
addrs=()
for h in "${hosts[@]}"; do
    addrs+=("$(node_addr "$h")")
done
rdzv_endpoint=${addrs[0]}:$RDZV_PORT
worker_hosts=$(for k in "${!addrs[@]}"; do printf '%s:%s\n' "${addrs[$k]}" "$((TF_PORT + k))"; done | paste -sd, -)

extra=()
if [[ -n "${SAVE_BASELINE:-}" && "${SAVE_BASELINE}" != 0 ]]; then
    extra+=(--perf-save-baseline)
fi

mkdir -p "$LOG_DIR"
echo "nodes: ${hosts[*]}; rendezvous $rdzv_endpoint; TF workers $worker_hosts; logs in $LOG_DIR/"

# Exported for the per-node command below, which srun starts on every node.
export PERF_PYTHON=$PYTHON PERF_LOG_DIR=$LOG_DIR
export PERF_RDZV_ENDPOINT=$rdzv_endpoint PERF_WORKER_HOSTS=$worker_hosts

# One log per node (%n = node index, %N = node name); each node writes its own report
# folder. SLURM_NODEID is read on the node itself, hence the single quotes.
# shellcheck disable=SC2016
srun --nodes="$SLURM_NNODES" --ntasks-per-node=1 --kill-on-bad-exit=0 \
    --output="$LOG_DIR/node%n-%N.log" \
    bash -c '
        set -euo pipefail
        report="$PERF_LOG_DIR/node$SLURM_NODEID"
        exec "$PERF_PYTHON" -m pytest tests_perf -rs \
            --perf-nnodes "$SLURM_NNODES" --perf-node-rank "$SLURM_NODEID" \
            --perf-rdzv-endpoint "$PERF_RDZV_ENDPOINT" --perf-worker-hosts "$PERF_WORKER_HOSTS" \
            --perf-report "$report" --junitxml "$report/junit.xml" "$@"
    ' node-command "${devices[@]}" "${extra[@]}" "$@"
