#!/usr/bin/env bash
# `make e2e`: the operator tests (pytest -m envtest) against a kind cluster instead of the
# kube-apiserver that tests/envtest.py starts on loopback. Not part of `make test`.
#
#   1. create a kind cluster (or reuse one of the same name),
#   2. build and load the images whose Dockerfiles exist (images/*.Dockerfile),
#   3. apply crds/ and wait until they are established,
#   4. run `pytest -m envtest` with LOCKGATE_E2E_KUBECONFIG pointing at the cluster: the
#      operator runs in the test process and the tests assert on the objects it writes.
#
# Needs Docker (with a running daemon), kind and kubectl, plus `make setup`.
# Settings (environment):
#   LOCKGATE_KIND_CLUSTER   cluster name (default lockgate-e2e)
#   LOCKGATE_KIND_KEEP=1    keep the cluster afterwards (default: delete the one we made)
#   LOCKGATE_E2E_KUBECONFIG use this existing cluster: no kind, no images, steps 3-4 only
# Extra arguments go to pytest, e.g. `bash hack/e2e-kind.sh -k flashboot -x`.
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER="${LOCKGATE_KIND_CLUSTER:-lockgate-e2e}"
KEEP="${LOCKGATE_KIND_KEEP:-0}"
PY="${PY:-.venv/bin/python}"
IMAGE_TAG=e2e
# image name -> Dockerfile (added by the packaging work; skipped while absent)
IMAGES=("control-plane=images/control-plane.Dockerfile" "worker=images/worker.Dockerfile")

say() { printf 'e2e: %s\n' "$*"; }
die() {
  say "$*" >&2
  exit 1
}

need() { # need PROGRAM HOW-TO-GET-IT
  command -v "$1" >/dev/null 2>&1 || die "$1 not found: $2. (make test runs the same tests against envtest.)"
}

WORK="$(mktemp -d)"
MADE_CLUSTER=0
cleanup() {
  if [[ $MADE_CLUSTER == 1 && $KEEP != 1 ]]; then
    say "deleting kind cluster $CLUSTER (LOCKGATE_KIND_KEEP=1 keeps it)"
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

kind_cluster() { # create or reuse the cluster; writes its kubeconfig
  need docker "install Docker: https://docs.docker.com/get-docker/"
  docker info >/dev/null 2>&1 || die "the Docker daemon is not reachable (docker info failed): start it"
  need kind "install kind: https://kind.sigs.k8s.io/docs/user/quick-start/#installation"
  if grep -qx "$CLUSTER" <<<"$(kind get clusters 2>/dev/null)"; then
    say "reusing kind cluster $CLUSTER"
  else
    say "creating kind cluster $CLUSTER"
    MADE_CLUSTER=1
    kind create cluster --name "$CLUSTER" --wait 180s
  fi
  kind get kubeconfig --name "$CLUSTER" >"$WORK/kubeconfig"
  LOCKGATE_E2E_KUBECONFIG="$WORK/kubeconfig"
}

load_images() { # build and load every image whose Dockerfile exists
  local entry name dockerfile image
  for entry in "${IMAGES[@]}"; do
    name="${entry%%=*}"
    dockerfile="${entry#*=}"
    if [[ ! -f $dockerfile ]]; then
      say "skipping image $name: $dockerfile does not exist yet"
      continue
    fi
    image="lockgate/$name:$IMAGE_TAG"
    say "building $image from $dockerfile"
    docker build -f "$dockerfile" -t "$image" .
    kind load docker-image "$image" --name "$CLUSTER"
  done
}

main() {
  need kubectl "install kubectl: https://kubernetes.io/docs/tasks/tools/"
  [[ -x $PY ]] || die "$PY not found: run make setup first"
  if [[ -n ${LOCKGATE_E2E_KUBECONFIG:-} ]]; then
    [[ -r $LOCKGATE_E2E_KUBECONFIG ]] || die "LOCKGATE_E2E_KUBECONFIG=$LOCKGATE_E2E_KUBECONFIG is not readable"
    say "using the cluster of $LOCKGATE_E2E_KUBECONFIG"
  else
    kind_cluster
    load_images
  fi
  local kubectl=(kubectl --kubeconfig "$LOCKGATE_E2E_KUBECONFIG")
  say "applying crds/"
  "${kubectl[@]}" apply -f crds/
  "${kubectl[@]}" wait --for condition=established --timeout=60s -f crds/
  say "running the operator tests (pytest -m envtest) against the cluster"
  LOCKGATE_E2E_KUBECONFIG="$LOCKGATE_E2E_KUBECONFIG" LOCKGATE_REQUIRE_ENVTEST=1 \
    "$PY" -m pytest -m envtest "$@"
}

main "$@"
