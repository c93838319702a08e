#!/usr/bin/env bash
# Build, once, the real Kubernetes the tests run against: the control plane of the operator
# tests ("envtest": kube-apiserver, kube-controller-manager) and the node of the cluster
# tests (kube-scheduler, kubelet, kube-proxy, kubectl, and the static `pause` binary of the
# sandbox image), all v1.20.2 compiled in one tree from Debian's `kubernetes` source
# package, plus Debian's etcd. Everything lands in a cache folder outside the repo:
#
#   ${LOCKGATE_ENVTEST_DIR:-$HOME/.cache/lockgate-envtest}/bin/{kube-*,kubelet,kubectl,pause,etcd}
#
# Idempotent: when the three binaries are there and run, it says so and exits at once.
# A cold build takes several minutes (2 cores) and about 2 GB of disk while it runs; the
# source tree and build output are deleted afterwards, only bin/ and build.log stay.
# tests/envtest.py starts and stops the control plane on 127.0.0.1; tests/cluster.py adds
# containerd (Debian) and the node parts on a bridge of its own.
set -euo pipefail

K8S_VERSION=1.20.2
DEB_SRC_VERSION=1.20.5+really1.20.2-1.1+deb12u1
GO_PKG=golang-1.19-go
GO_BIN=/usr/lib/go-1.19/bin
REFLECT2_DEB=/usr/share/gocode/src/github.com/modern-go/reflect2
BUILD_PKGS=("$GO_PKG" rsync openssl make gcc libc6-dev golang-github-modern-go-reflect2-dev)
# What the node of tests/cluster.py runs beside the built binaries (its HOST_PROGRAMS and
# CNI plugins), and the password-protected registry of tests/registry.py (docker-registry,
# htpasswd from apache2-utils, skopeo to push): installed on every run, since a machine
# may have the cache but not these. (Where systemd runs, the package also starts a
# docker-registry service on :5000; the tests start their own registry, never that one.)
NODE_PKGS=(containerd runc containernetworking-plugins iptables iproute2
  docker-registry apache2-utils skopeo)

CACHE="${LOCKGATE_ENVTEST_DIR:-$HOME/.cache/lockgate-envtest}"
BIN="$CACHE/bin"
WORK="$CACHE/work"
LOG="$CACHE/build.log"
SRC="$WORK/kubernetes-$K8S_VERSION"

TAG=envtest
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

runs() { [[ -x "$1" ]] && "$1" --version >/dev/null 2>&1; }

KUBE_BINS=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet)

kube_ready() {
  local b
  for b in "${KUBE_BINS[@]}"; do runs "$BIN/$b" || return 1; done
  local version  # read whole, then matched (a `| grep -q` can SIGPIPE its writer)
  [[ -x "$BIN/kubectl" && -x "$BIN/pause" ]] &&
    version="$("$BIN/kube-apiserver" --version 2>/dev/null)" &&
    [[ "$version" == *"v$K8S_VERSION" ]]
}

all_ready() { kube_ready && runs "$BIN/etcd"; }

# The Debian mirror this machine already uses (first bookworm entry), deb822 or one-line format.
debian_mirror() {
  local f uri=""
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$f" ]] || continue
    uri=$(awk 'BEGIN { RS = ""; FS = "\n" }
      {
        uris = ""; suites = ""; on = 1
        for (i = 1; i <= NF; i++) {
          l = $i
          if (l ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", l); uris = l }
          else if (l ~ /^Suites:/) { sub(/^Suites:[ \t]*/, "", l); suites = " " l " " }
          else if (l ~ /^Enabled:[ \t]*[Nn]o/) { on = 0 }
        }
        if (on && suites ~ /[ \t]bookworm[ \t]/ && uris != "") { split(uris, u, /[ \t]+/); print u[1]; exit }
      }' "$f")
    [[ -n "$uri" ]] && break
  done
  if [[ -z "$uri" ]]; then
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
      [[ -f "$f" ]] || continue
      uri=$(awk '$1 == "deb" || $1 == "deb-src" {
          i = 2
          if ($i ~ /^\[/) { while (i < NF && $i !~ /\]$/) i++; i++ }
          if ($(i + 1) == "bookworm") { print $i; exit }
        }' "$f")
      [[ -n "$uri" ]] && break
    done
  fi
  printf '%s\n' "${uri:-http://deb.debian.org/debian}"
}

# Download the source package with a private apt configuration: the machine's own apt
# sources, lists and caches are left untouched.
fetch_source() {
  local apt="$WORK/apt" mirror opts
  ls "$WORK"/dl/kubernetes_*.orig.tar.* >/dev/null 2>&1 && return 0
  mirror=$(debian_mirror)
  say "downloading Debian source package kubernetes=$DEB_SRC_VERSION from $mirror…"
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$WORK/dl"
  printf 'deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s bookworm main\n' \
    "$mirror" >"$apt/sources.list"
  opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o APT::Sandbox::User=root)
  run apt-get "${opts[@]}" update
  if ! (cd "$WORK/dl" && apt-get "${opts[@]}" source --download-only \
    "kubernetes=$DEB_SRC_VERSION" >>"$LOG" 2>&1); then
    say "version $DEB_SRC_VERSION not on the mirror; trying the current bookworm kubernetes"
    (cd "$WORK/dl" && run apt-get "${opts[@]}" source --download-only kubernetes)
  fi
  ls "$WORK"/dl/kubernetes_*.orig.tar.* >/dev/null 2>&1 || die "no .orig tarball downloaded"
}

unpack_source() {
  [[ -e "$WORK/.unpacked" ]] && return 0
  say "unpacking the source…"
  rm -rf "$SRC"
  local orig
  orig=$(find "$WORK/dl" -maxdepth 1 -name 'kubernetes_*.orig.tar.*' | head -n 1)
  run tar -xf "$orig" -C "$WORK"
  [[ -d "$SRC/cmd/kube-apiserver" ]] || die "the .orig tarball has no kubernetes-$K8S_VERSION/ tree"
  touch "$WORK/.unpacked"
}

# The vendored reflect2 1.0.1 crashes under Go >= 1.18 the first time a custom object is
# created; use Debian's 1.0.2 instead (without its go.mod; the vendored LICENSE stays).
patch_reflect2() {
  local dst="$SRC/vendor/github.com/modern-go/reflect2"
  [[ -e "$WORK/.patched" ]] && return 0
  [[ -f "$REFLECT2_DEB/reflect2.go" ]] || die "missing $REFLECT2_DEB (golang-github-modern-go-reflect2-dev)"
  say "replacing vendored modern-go/reflect2 with Debian's 1.0.2…"
  run rsync -a --delete --exclude LICENSE --exclude go.mod --exclude go.sum "$REFLECT2_DEB/" "$dst/"
  touch "$WORK/.patched"
}

build_kube() {
  local t0=$SECONDS
  export PATH="$GO_BIN:$PATH" GOPROXY=off GOFLAGS="" GOTOOLCHAIN=local
  export KUBE_GIT_VERSION="v$K8S_VERSION" KUBE_GIT_TREE_STATE=clean KUBE_GIT_MAJOR=1 KUBE_GIT_MINOR=20
  cd "$SRC"
  if [[ ! -e "$WORK/.openapi" ]]; then
    say "generating OpenAPI code (a minute or two)…"
    run nice -n 10 make gen_openapi
    touch "$WORK/.openapi"
  fi
  say "building ${KUBE_BINS[*]} and kubectl (several minutes)…"
  run nice -n 10 hack/make-rules/build.sh "${KUBE_BINS[@]/#/cmd/}" cmd/kubectl
  # The sandbox ("pause") image's one binary, from the same tree.
  run gcc -Os -static -DVERSION="v$K8S_VERSION" -o "$WORK/pause" build/pause/linux/pause.c
  say "compiled in $((SECONDS - t0)) s"
}

install_kube() {
  local out="$SRC/_output/local/bin/linux/amd64" b
  [[ -x "$out/kube-apiserver" ]] || out=$(dirname "$(find "$SRC/_output" -type f -name kube-apiserver | head -n 1)")
  mkdir -p "$BIN"
  for b in "${KUBE_BINS[@]}" kubectl; do
    [[ -x "$out/$b" ]] || die "build produced no $b"
    cp "$out/$b" "$BIN/.$b.tmp"
    mv -f "$BIN/.$b.tmp" "$BIN/$b"
  done
  cp "$WORK/pause" "$BIN/.pause.tmp"
  mv -f "$BIN/.pause.tmp" "$BIN/pause"
}

link_etcd() {
  local etcd
  etcd=$(command -v etcd || true)
  [[ -n "$etcd" ]] || etcd=/usr/bin/etcd
  mkdir -p "$BIN"
  ln -sfn "$etcd" "$BIN/etcd"
  runs "$BIN/etcd" || die "$etcd does not run"
}

main() {
  local t0=$SECONDS
  mkdir -p "$CACHE"
  install_pkgs "${NODE_PKGS[@]}"
  if all_ready; then
    say "binaries ready in $BIN"
    return 0
  fi
  # One build at a time per cache dir (parallel test sessions, CI retries).
  exec 9>"$CACHE/.lock"
  flock 9
  if all_ready; then
    say "binaries ready in $BIN"
    return 0
  fi
  : >"$LOG"
  if kube_ready; then
    install_pkgs etcd-server
  else
    install_pkgs etcd-server "${BUILD_PKGS[@]}"
  fi
  link_etcd
  if ! kube_ready; then
    say "building Kubernetes v$K8S_VERSION into $CACHE (log: $LOG)"
    fetch_source
    unpack_source
    patch_reflect2
    build_kube
    install_kube
    kube_ready || die "the built binaries do not run"
    say "removing the source tree and build output…"
    cd "$CACHE"
    rm -rf "$WORK"
  fi
  say "done in $((SECONDS - t0)) s"
  say "binaries ready in $BIN"
}

main "$@"
