#!/usr/bin/env bash
# The Kubernetes manifests pass their API schemas and the DaemonSet's promises (validate.mjs), and
# broken copies fail: a wrong type, and a GPU request on wsyncd.
#   manifests_test.sh SOURCE_DIR
set -euo pipefail
src=$1
check="$src/tests/k8s/validate.mjs"
if [[ ! -d "$src/tests/k8s/node_modules/kubernetes-models" ]]; then
  echo "tests/k8s/node_modules is missing: run deploy/install-deps.sh (npm ci in tests/k8s)" >&2
  exit 1
fi
node "$check" "$src"/deploy/kubernetes/*.yaml
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed 's/hostIPC: true/hostIPC: "yes"/' "$src/deploy/kubernetes/wsyncd-daemonset.yaml" >"$tmp/type.yaml"
sed 's|requests: {cpu: 500m, memory: 1Gi}|requests: {cpu: 500m, memory: 1Gi, nvidia.com/gpu: 1}|' \
  "$src/deploy/kubernetes/wsyncd-daemonset.yaml" >"$tmp/gpu.yaml"
for bad in type gpu; do
  if out=$(node "$check" "$tmp/$bad.yaml" 2>&1); then
    echo "a broken manifest ($bad) passed: $out" >&2
    exit 1
  fi
  echo "refused as it must be ($bad): $out"
done
