#!/usr/bin/env bash
# Creates the run token of a recur run as a Kubernetes Secret (256 random bits, hex), read by
# the learner (copied into RUN_DIR/token, mode 0600, which the learner keeps) and the actors.
#   scripts/k8s/secret.sh [NAMESPACE]
set -euo pipefail
ns=${1:-default}
token=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
kubectl -n "$ns" create secret generic recur-token --from-literal=token="$token"
