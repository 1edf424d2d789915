#!/usr/bin/env bash
# Creates the run's credentials as the Kubernetes Secret recur-token:
#   token         the run token (256 random bits, hex) and, on its second line, the SHA-256 of
#                 the learner's certificate (`tls-sha256 HEX`), which actors pin (TLS 1.3)
#   tls-cert.der  the learner's self-signed certificate (ECDSA P-256, DER)
#   tls-key.der   its key (PKCS#8, DER): mounted into the learner only
# The learner's init container installs all three into RUN_DIR (mode 0600), where the learner
# keeps them; the actors mount `token` alone.
#   scripts/k8s/secret.sh [NAMESPACE]
set -euo pipefail
ns=${1:-default}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
token=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 36500 \
  -subj /CN=recur-learner -addext subjectAltName=DNS:recur-learner \
  -keyout "$dir/key.pem" -out "$dir/cert.pem" 2>/dev/null
openssl x509 -in "$dir/cert.pem" -outform DER -out "$dir/tls-cert.der"
openssl pkcs8 -topk8 -nocrypt -in "$dir/key.pem" -outform DER -out "$dir/tls-key.der"
fingerprint=$(sha256sum "$dir/tls-cert.der" | cut -d' ' -f1)
printf '%s\ntls-sha256 %s\n' "$token" "$fingerprint" >"$dir/token"
kubectl -n "$ns" create secret generic recur-token \
  --from-file=token="$dir/token" \
  --from-file=tls-cert.der="$dir/tls-cert.der" \
  --from-file=tls-key.der="$dir/tls-key.der"
