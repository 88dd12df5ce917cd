#!/usr/bin/env bash
# Start or stop the Ray cluster the rollout engines and reward workers run on.
#   bash launch/ray_cluster.sh start-head [--block]             # on the first node
#   bash launch/ray_cluster.sh start-worker HEAD:PORT [--block] # on every other node
#   bash launch/ray_cluster.sh wait HEAD:PORT GPUS [TIMEOUT_S]  # until GPUS GPUs have joined
#   bash launch/ray_cluster.sh stop                             # on every node
# RAY_PORT (default 6379) is the head's port; NUM_GPUS the GPUs this node offers to Ray
# (default: all it sees; 0 on training-only nodes when rollout has GPUs of its own, so that
# engines land on the rollout nodes); NODE_IP the address to bind (default: hostname -I's
# first). start-head prints the address to pass to hyrl as --ray-address (recipes read
# RAY_ADDRESS). --block keeps the command in the foreground (needed under srun).
# RAY_AUTH_MODE: one mode for the head, the workers and hyrl's rank 0 (which joins with
# disabled unless the variable says otherwise: hyrl.rollout.build.start_ray). Ray 2.60's
# `ray start --head` turns token auth on by itself when ~/.ray/auth_token exists; rank 0 could
# then not join. Set RAY_AUTH_MODE=token in the job's environment for tokens everywhere.
set -euo pipefail
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"
RAY_PORT="${RAY_PORT:-6379}"
usage() { sed -n '2,11p' "$0" >&2; exit 2; }
node_ip() { echo "${NODE_IP:-$(hostname -I 2>/dev/null | awk '{print $1}')}"; }
gpu_args() { if [[ -n "${NUM_GPUS:-}" ]]; then echo "--num-gpus $NUM_GPUS"; fi; }
run() { echo "+ $*" >&2; "$@"; }
command -v ray >/dev/null || { echo "launch/ray_cluster.sh: ray is not installed (pip install -r requirements.txt)" >&2; exit 2; }
case "${1:-}" in
  start-head)
    ip="$(node_ip)"
    echo "RAY_ADDRESS=$ip:$RAY_PORT   # pass as --ray-address $ip:$RAY_PORT" >&2
    # shellcheck disable=SC2046
    run ray start --head --node-ip-address "$ip" --port "$RAY_PORT" $(gpu_args) \
      --disable-usage-stats "${@:2}"
    ;;
  start-worker)
    [[ -n "${2:-}" ]] || usage
    # shellcheck disable=SC2046
    run ray start --address "$2" --node-ip-address "$(node_ip)" $(gpu_args) \
      --disable-usage-stats "${@:3}"
    ;;
  wait)
    [[ -n "${2:-}" && -n "${3:-}" ]] || usage
    deadline=$((SECONDS + ${4:-300}))
    echo "+ waiting for $3 GPUs in the Ray cluster at $2" >&2
    until [[ "$(RAY_ADDRESS="$2" python -c 'import ray; ray.init(); print(int(ray.cluster_resources().get("GPU", 0)))' 2>/dev/null)" -ge "$3" ]]; do
      (( SECONDS < deadline )) || { echo "launch/ray_cluster.sh: fewer than $3 GPUs joined $2 in ${4:-300} s" >&2; exit 1; }
      sleep 5
    done
    echo "ray cluster at $2 has >= $3 GPUs" >&2
    ;;
  stop) run ray stop --force ;;
  *) usage ;;
esac
