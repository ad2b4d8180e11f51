#!/bin/bash
# Fleet sweep under Slurm: every node of a partition runs the same single-node suite in an
# exclusive job of its own, each writing to one shared results history; then one job,
# dependent on them all (afterany), compares the nodes with each other
# (`python -m perfsuite history fleet`) and fails when a node is flagged.
#
#   HISTORY=postgresql://perf@db/perf examples/slurm-fleet.sh                 # the default partition, GPU suite
#   HISTORY=... PARTITION=h100 examples/slurm-fleet.sh --perf-model resnet50  # extra arguments go to each node's pytest
#   HISTORY=... examples/slurm-fleet.sh -m "gpu and not slow"                 # (a later -m replaces the script's)
#   HISTORY=... NODES='gpu[01-16]' examples/slurm-fleet.sh                     # these nodes only
#   HISTORY=... CPU_WORKERS=2 examples/slurm-fleet.sh                          # CPU mode: no GPU needed
#   HISTORY=... WAIT=1 examples/slurm-fleet.sh                                 # wait for the verdict, exit with it (CI)
#
# Run it (not sbatch it) from the repository root, on a login node with Slurm's commands and
# a file system every node sees, with the virtual environment made there by `make setup`
# (or set PYTHON). It submits the jobs and exits; WAIT=1 waits for the fleet check and
# exits with its code, after printing its log.
#
# What a flagged node means: the fleet check judges each node against the other nodes of its
# hardware fingerprint, its evidence pooled over every burst key it ran and the nights the
# history holds (one night, this sweep's, at the least); a node is flagged slow when it is more
# than the tolerance (5%) below its peers and the pooled evidence clears the fleet's false-flag
# bound (at most 1 healthy node flagged in 100 nights, however large the fleet). The node ran
# the same bursts, on the same hardware, in the same sweep, slower than its peers: drain it
# and look at it (clocks and thermals, power caps, a degraded link or device, firmware or
# driver versions, something else running there). A node whose job did not run to the end
# (cancelled, failed to start, killed) is named as "did not report", with its log's last line;
# one whose bursts failed as "failed". A node that is down, drained or reserved when the sweep
# starts is skipped, and said. A group needs at least 3 nodes to judge; fewer are listed,
# never flagged.
#
# Exit codes: the fleet job's (and WAIT=1's) is the check's: 0 = every node reported and none is
# slow, 3 = a node slow, did not report or failed (its name is in the fleet log), other = the
# check itself failed. Each node job's is its pytest's (1 = a failed gate or burst against the
# stored baselines); the fleet log lists every node's.
#
# Settings, from the environment:
#   HISTORY        the shared results history (--perf-history URL), required; the job scripts
#                  hold it as given (logs mask a password), so better keep the password in
#                  ~/.pgpass or PGPASSWORD on the nodes
#   PARTITION      the partition to sweep (default: Slurm's default partition)
#   NODES          the nodes to sweep, a Slurm host list (default: every node of the
#                  partition); those not idle, mixed or allocated (down, drained, reserved)
#                  are skipped, and said
#   GPUS           GPUs per node (default: each node's gpu GRES count)
#   CPU_WORKERS    CPU mode: `-m cpu --perf-cpu-workers N` instead of `-m gpu --perf-gpus GPUS`
#   ONE_AT_A_TIME  1: the node jobs run one after another (--dependency=singleton), for
#                  nodes that share hardware, e.g. several slurmd on one host
#   SINCE          hours of history the fleet check reads (default: since the sweep began)
#   FLEET_ARGS     more arguments of the fleet check, e.g. "--tolerance 0.08 --plot fleet.png"
#   TIME_LIMIT     each node job's time limit (default 02:00:00)
#   FLUSH_MINUTES  how long a node job keeps trying to write its run when the history is
#                  unreachable (default 10); meanwhile the run waits in the node's spool
#   LOG_DIR        logs and report folders (default perf-logs/fleet-DATE-TIME):
#                  NODE-JOBID.log, NODE/ (its report), NODE.status, fleet-JOBID.log
#   PYTHON         the Python of the virtual environment (default .venv/bin/python)
#   WAIT           1: wait for the fleet check (see above)

set -euo pipefail

PYTHON=${PYTHON:-.venv/bin/python}
HISTORY=${HISTORY:-}
CPU_WORKERS=${CPU_WORKERS:-}
TIME_LIMIT=${TIME_LIMIT:-02:00:00}
FLUSH_MINUTES=${FLUSH_MINUTES:-10}
LOG_DIR=${LOG_DIR:-perf-logs/fleet-$(date +%Y%m%d-%H%M%S)}
JOB_NAME=perfsuite-fleet-node

die() {
    echo "error: $*" >&2
    exit 2
}

[[ -n "$HISTORY" ]] || die "set HISTORY to the shared results history's URL (e.g. postgresql://user@host/db)"
[[ -x "$PYTHON" ]] || die "no Python at $PYTHON: run 'make setup' first, or set PYTHON"
[[ -z "$CPU_WORKERS" || "$CPU_WORKERS" =~ ^[1-9][0-9]*$ ]] || die "CPU_WORKERS must be a positive number (got '$CPU_WORKERS')"

PARTITION=${PARTITION:-$(sinfo -h -o %P | sed -n 's/\*$//p' | head -n 1)}
[[ -n "$PARTITION" ]] || die "no default partition: set PARTITION"

# Each node's state in the partition: only those that can run a job now (idle, mixed or
# allocated, with no flag: *, ~, #, ...) are swept; the others are skipped, and said, so a
# node that is down is never mistaken for one that did not report.
declare -A state_of
while read -r name state; do
    state_of[$name]=$state
done < <(sinfo -h -N -p "$PARTITION" -o '%N %t' | sort -u)
if [[ -n "${NODES:-}" ]]; then
    mapfile -t wanted < <(scontrol show hostnames "$NODES")
else
    mapfile -t wanted < <(printf '%s\n' "${!state_of[@]}" | sort -V)
fi
nodes=()
for node in "${wanted[@]}"; do
    state=${state_of[$node]:-}
    if [[ "$state" =~ ^(idle|mix|alloc)$ ]]; then
        nodes+=("$node")
    elif [[ -z "$state" ]]; then
        echo "node $node: skipped, not in partition $PARTITION"
    else
        reason=$(sinfo -h -N -n "$node" -p "$PARTITION" -o %E | head -n 1)
        echo "node $node: skipped, it is $state${reason:+ ($reason)}"
    fi
done
((${#nodes[@]} > 0)) || die "no node to sweep in partition $PARTITION"
if ((${#nodes[@]} < 3)); then
    echo "warning: ${#nodes[@]} node(s): the fleet check needs at least 3 of one fingerprint to flag one" >&2
fi

# A node's GPU count from its GRES (gpu:8, gpu:h100:8(S:0-1), ...).
node_gpus() {
    sinfo -h -N -n "$1" -o %G | tr ',' '\n' | sed -n 's/^gpu:\([^(]*:\)\{0,1\}\([0-9][0-9]*\).*/\2/p' | head -n 1
}

quote() { printf '%q ' "$@"; }
# The same for a log line, any password in a URL masked (keep it out of HISTORY: ~/.pgpass, PGPASSWORD).
shown() { quote "$@" | sed -E 's#([A-Za-z][A-Za-z0-9+.-]*://[^:/@[:space:]]+):[^[:space:]]*@#\1:***@#g; s#(password|passwd|pwd)=[^&[:space:]]*#\1=***#gI'; }

mkdir -p "$LOG_DIR"
started=$(date +%s)
serial=()
if [[ "${ONE_AT_A_TIME:-0}" != 0 ]]; then
    serial=(--dependency=singleton)
fi

ids=()
for node in "${nodes[@]}"; do
    gres=()
    if [[ -n "$CPU_WORKERS" ]]; then
        devices=(-m cpu --perf-cpu-workers "$CPU_WORKERS")
    else
        gpus=${GPUS:-$(node_gpus "$node")}
        [[ "$gpus" =~ ^[1-9][0-9]*$ ]] || die "GPUs of node $node unknown (GRES '$(sinfo -h -N -n "$node" -o %G)'): set GPUS, or CPU_WORKERS for CPU mode"
        devices=(-m gpu --perf-gpus "$gpus")
        gres=(--gpus-per-node="$gpus")
    fi
    cmd=("$PYTHON" -m pytest tests_perf -rs "${devices[@]}" --perf-history "$HISTORY" --perf-node "$node"
        --perf-report "$LOG_DIR/$node" --junitxml "$LOG_DIR/$node/junit.xml" "$@")
    flush=("$PYTHON" -m perfsuite history import --history "$HISTORY" --retry 0)  # the loop below waits
    # The job's script, written here: every value is known at submission. A run the history
    # could not take (the database restarting) waits in the node's spool; the job writes it
    # once the history is back, within FLUSH_MINUTES, so the fleet check sees it tonight.
    id=$(sbatch --parsable --partition="$PARTITION" --nodelist="$node" --nodes=1 --ntasks=1 --exclusive \
        --job-name="$JOB_NAME" --time="$TIME_LIMIT" --output="$LOG_DIR/$node-%j.log" \
        "${serial[@]}" "${gres[@]}" <<EOF
#!/bin/bash
echo "node $node, job \$SLURM_JOB_ID, \$(date -u +%FT%TZ): $(shown "${cmd[@]}")"
status=0
$(quote "${cmd[@]}") || status=\$?
for try in \$(seq 1 $((FLUSH_MINUTES * 6))); do
    $(quote "${flush[@]}") && break
    echo "node $node: the history is unreachable; its runs wait in the spool, written as soon as it is back (try \$try)"
    sleep 10
done
echo "\$status" > $(printf %q "$LOG_DIR/$node.status")
exit "\$status"
EOF
    )
    ids+=("${id%%;*}")
    echo "node $node: job ${id%%;*}"
done

# The fleet check, once every node job has ended however it ended. It reads the history
# since the sweep began (a minute's margin) unless SINCE says otherwise.
read -r -a fleet_args <<<"${FLEET_ARGS:-}"
# --expect: every node swept is to report; one whose job did not run to the end did not.
check=("$PYTHON" -m perfsuite history fleet --history "$HISTORY" --fail-on-flagged
    --expect "$(IFS=,; echo "${nodes[*]}")" "${fleet_args[@]}")
dependency=afterany:$(IFS=:; echo "${ids[*]}")
wait_flag=()
if [[ "${WAIT:-0}" != 0 ]]; then
    wait_flag=(--wait)
fi
status=0
fleet_id=$(sbatch --parsable "${wait_flag[@]}" --partition="$PARTITION" --nodes=1 --ntasks=1 \
    --job-name=perfsuite-fleet-check --dependency="$dependency" --kill-on-invalid-dep=no \
    --time=00:30:00 --output="$LOG_DIR/fleet-%j.log" <<EOF
#!/bin/bash
for node in $(quote "${nodes[@]}"); do
    file=$(printf %q "$LOG_DIR")/\$node.status
    if [[ -f "\$file" ]]; then
        echo "node \$node: pytest exit \$(cat "\$file")"
    else
        last=\$(cat $(printf %q "$LOG_DIR")/"\$node"-*.log 2>/dev/null | grep -v '^[[:space:]]*\$' | tail -n 1)
        echo "node \$node: no result (its job did not run to the end); the last line of its log: \${last:-(no log)}"
    fi
done
since=$(printf %q "${SINCE:-}")
if [[ -z "\$since" ]]; then
    elapsed=\$(( \$(date +%s) - $started + 60 ))
    since=\$(( elapsed / 3600 )).\$(printf %03d \$(( elapsed % 3600 * 1000 / 3600 )))
fi
echo "$(shown "${check[@]}")--since \$since"
exec $(quote "${check[@]}")--since "\$since"
EOF
) || status=$?
fleet_id=${fleet_id%%;*}
echo "fleet check: job $fleet_id, after jobs ${ids[*]}; logs in $LOG_DIR/"
if [[ "${WAIT:-0}" != 0 ]]; then
    cat "$LOG_DIR/fleet-$fleet_id.log" 2>/dev/null || echo "(no fleet log at $LOG_DIR/fleet-$fleet_id.log)"
    echo "fleet check: exit $status"
    exit "$status"
fi
