#!/usr/bin/env bash
# Measures the manager's own latency, without Ptah's run time: from an edit of
# a PtahSchema's ConfigMap source to (1) the new snapshot recorded in status
# and (2) the Observe Job of the new claim created. N edits on the running
# harness, one manager in a namespace of its own; prints each and the median.
# Usage: conformance/bench/schema-edit.sh [N]   (after `ptah-harness up`)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
runs=${1:-10}
cargo build --quiet --workspace --bins
source .harness/env
target=${CARGO_TARGET_DIR:-target}/debug
ns=bench-edit-$$
work=$(mktemp -d /tmp/ptah-bench-XXXXXX)
cleanup() {
  kubectl delete ptahschema orders -n "$ns" --wait=true --timeout=30s >/dev/null 2>&1 || true
  [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null || true
  kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
kubectl create namespace "$ns" >/dev/null
kubectl apply --server-side -f charts/ptah-operator/crds/ >/dev/null
kubectl -n "$ns" create secret generic orders-db \
  --from-file=url=.harness/secrets/postgres.url >/dev/null
kubectl -n "$ns" create configmap orders-schema \
  --from-literal=schema.sql='CREATE TABLE t0 (id int);' >/dev/null
kubectl apply --server-side -n "$ns" -f - >/dev/null <<YAML
apiVersion: operator.ptah.run/v1alpha1
kind: PtahSchema
metadata: {name: orders}
spec:
  target: {engine: PostgreSQL, urlFrom: {name: orders-db, key: url}, coordinationKey: orders}
  source: {configMap: {name: orders-schema, keys: [schema.sql]}}
  execution: {failureRetryInterval: 1h}
YAML
"$target"/ptah-operator --listen 127.0.0.1:0 --tls-dir "$work/tls" \
  --token-key-file "$work/key" \
  --runner-image ghcr.io/ptah-run/ptah-operator@sha256:adadadadadadadadadadadadadadadadadadadadadadadadadadadadadadadad \
  --executor-image ghcr.io/ptah-run/ptah-executor@sha256:aeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeaeae \
  --coordination-namespace "$ns" --watch-namespace "$ns" 2>"$work/manager.log" &
pid=$!

now() { date +%s%N; }
digest() { kubectl get ptahschema orders -n "$ns" -o jsonpath='{.status.source.contentDigest}'; }
observe_jobs() { kubectl get jobs -n "$ns" -l operator.ptah.run/operation=observe -o name | wc -l; }
# The first read settles first: wait for its Observe Job.
until [ "$(observe_jobs)" -ge 1 ]; do sleep 0.05; done
snap=() job=()
for i in $(seq "$runs"); do
  before=$(digest) jobs=$(observe_jobs)
  t0=$(now)
  kubectl patch configmap orders-schema -n "$ns" --type merge \
    -p "{\"data\":{\"schema.sql\":\"CREATE TABLE t$i (id int);\"}}" >/dev/null
  until [ "$(digest)" != "$before" ]; do sleep 0.02; done
  t1=$(now)
  until [ "$(observe_jobs)" -gt "$jobs" ]; do sleep 0.02; done
  t2=$(now)
  s=$(( (t1 - t0) / 1000000 )) j=$(( (t2 - t0) / 1000000 ))
  snap+=("$s") job+=("$j")
  printf 'edit %2d: snapshot recorded %5d ms, Observe Job created %5d ms\n' "$i" "$s" "$j"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf 'median: snapshot recorded %d ms, Observe Job created %d ms (n=%d; polling every 20 ms)\n' \
  "$(median "${snap[@]}")" "$(median "${job[@]}")" "$runs"
