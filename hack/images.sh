#!/usr/bin/env bash
# Build, without Docker or a registry, the container images a real single-node cluster
# runs in tests, from the project's own Dockerfiles (what users build is what is tested).
# Everything lands in a cache folder outside the repo:
#
#   ${LOCKGATE_IMAGES_DIR:-$HOME/.cache/lockgate-images}/
#     images.list            one line per image: name<TAB>archive (tests/images.py reads it)
#     archives/NAME.tar      docker-archive, for `ctr -n k8s.io images import` (keeps the tag)
#     archives/NAME.inputs   hash of what the image was built from (Dockerfile, context
#                            files, build args, base or parent image, wheelhouse)
#     base/rootfs.tar        Debian bookworm minbase + python3, made by mmdebstrap
#     debs/                  downloaded .debs (busybox-static for the flashboot helper)
#     wheels/                the wheelhouse pip installs from inside the builds (offline)
#     build.log, wheels.log
#
# How: mmdebstrap makes a local base image (nothing can be pulled here, not even
# python:3.11-slim); the host downloads every wheel the builds need (pip inside a build
# cannot verify PyPI's certificate here); buildah (vfs storage kept in the cache folder,
# chroot isolation) builds each Dockerfile with the base as its Python image and the
# wheelhouse mounted read-only with PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheelhouse.
#
# Idempotent: an image is rebuilt only when the hash of its inputs changed; with nothing
# to do it says so in about a second. Runs as root (tested so; the cluster needs it too). The pause image needs the static `pause` that
# hack/envtest.sh builds; until it exists that image is skipped (run again later).
# Settings (environment): LOCKGATE_IMAGES_DIR, LOCKGATE_ENVTEST_DIR, PYTHON (a host Python
# 3.11+ with pip, default python3).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE="${LOCKGATE_IMAGES_DIR:-$HOME/.cache/lockgate-images}"
PAUSE_BIN="${LOCKGATE_ENVTEST_DIR:-$HOME/.cache/lockgate-envtest}/bin/pause"
PYTHON="${PYTHON:-python3}"
LOG="$CACHE/build.log"
ARCHIVES="$CACHE/archives"
WHEELS="$CACHE/wheels"
BASE_TAR="$CACHE/base/rootfs.tar"
STORE="$CACHE/storage"

VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/pyproject.toml")
BASE=localhost/lockgate-test/base:bookworm
# The local stand-in for python:3.11-slim-bookworm: python-is-python3 because the
# Dockerfiles call `python`, python3-pip because they call `pip` outside a virtualenv.
BASE_PKGS=python3,python3-venv,python3-pip,python-is-python3,ca-certificates
# Its python3 (bookworm's, for the release's lifetime): wheels are chosen for it.
BASE_PYTHON=3.11.2
# Bump when the way images are built or exported changes: every image is rebuilt.
RECIPE=1
TOOLS=(buildah mmdebstrap eatmydata)

TAG=images
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# buildah with its storage and run state inside the cache (nothing is left in
# /var/lib/containers), niced: the machine may be compiling something else.
bah() {
  TMPDIR="$CACHE/tmp" BUILDAH_ISOLATION=chroot nice -n 10 \
    buildah --root "$STORE" --runroot "$CACHE/run" --storage-driver vfs "$@"
}

sha() { sha256sum | cut -c1-64; }

# -- base image ----------------------------------------------------------------------------

# The apt sources this machine already uses for bookworm (main), as one-line entries.
debian_sources() {
  local lines
  # shellcheck disable=SC2016 # apt expands $(…) itself
  lines=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' 'Identifier: Packages' 2>/dev/null |
    awk '$2 ~ /^bookworm(-updates|-security)?$/ && $3 == "main" { print "deb " $1 " " $2 " main" }' | sort -u)
  if [[ -z "$lines" ]]; then
    lines=$'deb http://deb.debian.org/debian bookworm main\ndeb http://deb.debian.org/debian bookworm-updates main\ndeb http://deb.debian.org/debian-security bookworm-security main'
  fi
  printf '%s\n' "$lines"
}

# The root file system, made once: packages change only when this file does (or the tar is
# deleted, e.g. to take security updates).
make_base_tar() {
  local key sources=()
  key=$(printf '%s %s\n' "$BASE_PKGS" "$RECIPE" | sha)
  [[ -f "$BASE_TAR" && "$(cat "$BASE_TAR.key" 2>/dev/null)" == "$key" ]] && return 0
  mapfile -t sources < <(debian_sources)
  say "making the base root file system with mmdebstrap (bookworm minbase + $BASE_PKGS)…"
  mkdir -p "$(dirname "$BASE_TAR")"
  # merged-usr: the /usr symlinks without the usrmerge package (and the perl it needs);
  # eatmydata: no fsync while unpacking. Documentation and translations are left out.
  run nice -n 10 mmdebstrap --variant=minbase --include="$BASE_PKGS" --format=tar \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --hook-dir=/usr/share/mmdebstrap/hooks/eatmydata \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    bookworm "$BASE_TAR.tmp" "${sources[@]}"
  local python
  # awk reads to the end (no `exit`): tar writing into a closed pipe would die of SIGPIPE,
  # and pipefail would make that the script's exit status (141).
  python=$(tar -xOf "$BASE_TAR.tmp" ./var/lib/dpkg/status |
    awk '/^Package: / { p = $2 } p == "python3.11-minimal" && /^Version: / && !v { v = $2 } END { print v }')
  [[ $python == "$BASE_PYTHON"-* ]] ||
    die "the base has python3.11 $python, not $BASE_PYTHON: set BASE_PYTHON in $0 to its version"
  sha <"$BASE_TAR.tmp" >"$BASE_TAR.sha256"
  mv -f "$BASE_TAR.tmp" "$BASE_TAR"
  printf '%s\n' "$key" >"$BASE_TAR.key"
  say "base root file system ready after $((SECONDS - T0)) s ($(du -h "$BASE_TAR" | cut -f1))"
}

# ensure_base: the base image in buildah's storage (imported from the tar when absent).
ensure_base() {
  local c
  bah inspect --type image "$BASE" >/dev/null 2>&1 && return 0
  say "importing the base image into buildah…"
  c=$(bah from --pull=never scratch)
  run bah add "$c" "$BASE_TAR" /
  run bah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd '["python3"]' "$c"
  run bah commit --rm --format docker "$c" "$BASE"
}

# -- wheelhouse ----------------------------------------------------------------------------

# Every requirement the builds install: lockgate's server, operator and models extras (with
# lockgate[…] self-references expanded), runpod as pinned by the test extra, and the build
# backend (setuptools, from [build-system]) for building lockgate itself.
requirements() {
  "$PYTHON" - "$REPO/pyproject.toml" <<'EOF'
import re, sys, tomllib

with open(sys.argv[1], "rb") as f:
    doc = tomllib.load(f)
project, extras = doc["project"], doc["project"]["optional-dependencies"]

def expand(reqs):
    for req in reqs:
        if m := re.fullmatch(r"lockgate\[(.+)\]", req):
            for extra in m.group(1).split(","):
                yield from expand(extras[extra.strip()])
        else:
            yield req

wanted = [*expand(project["dependencies"] + extras["server"] + extras["operator"] + extras["models"])]
wanted += [r for r in extras["test"] if re.match(r"runpod\b", r)]
wanted += doc["build-system"]["requires"] + ["wheel"]
print("\n".join(dict.fromkeys(wanted)))
EOF
}

# The pip requirement for runpod in pyproject.toml's test extra ("runpod>=1.7").
runpod_requirement() { requirements | grep -E '^runpod\b'; }

# Wheels for the base's Python on any glibc up to bookworm's 2.36; binary only, so the
# builds need no compiler. pip's --python-version covers wheel tags and Requires-Python but
# not environment markers (`async-timeout; python_full_version < "3.11.3"`), which it
# evaluates for the Python running it: the host's may be another 3.11.x, so pip runs with
# the markers of the base's Python.
download_wheels() {
  local platforms=() y
  for y in $(seq 36 -1 17); do platforms+=(--platform "manylinux_2_${y}_x86_64"); done
  platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
  rm -rf "$WHEELS.new"
  mkdir -p "$WHEELS.new"
  requirements >"$WHEELS.new/requirements.txt"
  nice -n 10 "$PYTHON" -c '
import sys
from pip._vendor.packaging import markers
version = sys.argv.pop(1)
env = markers.default_environment()
env.update(python_full_version=version, implementation_version=version,
           python_version=".".join(version.split(".")[:2]))
markers.default_environment = lambda: dict(env)
from pip._internal.cli.main import main
sys.exit(main())' "$BASE_PYTHON" download --disable-pip-version-check --progress-bar off \
    --dest "$WHEELS.new" --only-binary=:all: --python-version "$BASE_PYTHON" --implementation cp \
    --abi cp311 "${platforms[@]}" -r "$WHEELS.new/requirements.txt"
}

wheels_key() { { requirements; echo "$BASE_PYTHON $RECIPE"; } | sha; }

wheels_ready() { [[ "$(cat "$WHEELS/.key" 2>/dev/null)" == "$(wheels_key)" ]]; }

# Runs in the background while mmdebstrap works (both mostly wait on the network).
fetch_wheels() {
  wheels_ready && return 0
  : >"$CACHE/wheels.log"
  if ! download_wheels >>"$CACHE/wheels.log" 2>&1; then
    tail -n 20 "$CACHE/wheels.log" >&2
    return 1
  fi
  wheels_key >"$WHEELS.new/.key"
  rm -rf "$WHEELS"
  mv "$WHEELS.new" "$WHEELS"
}

# need_wheels: wait for the background download, once.
need_wheels() {
  [[ -n $WHEELS_PID ]] || return 0
  wait "$WHEELS_PID" || die "the wheel download failed (log: $CACHE/wheels.log)"
  WHEELS_PID=
  say "wheels ready in $WHEELS after $((SECONDS - T0)) s"
}

# -- images --------------------------------------------------------------------------------

# context_files DOCKERFILE CONTEXT: the context files the Dockerfile's COPY/ADD lines take
# (not COPY --from), one "sha256  path" line each, caches and bytecode left out as the
# .dockerignore does.
context_files() {
  local src path
  while read -r src; do
    (cd "$2" && compgen -G "$src") || echo "?$src" # globs, as COPY expands them
  done < <(awk 'toupper($1) == "COPY" || toupper($1) == "ADD" {
      if ($0 ~ /--from=/) next
      n = 0
      for (i = 2; i <= NF; i++) if ($i !~ /^--/) args[++n] = $i
      for (i = 1; i < n; i++) print args[i]
    }' "$1") | sort -u | while read -r path; do
    if [[ $path == \?* ]]; then
      echo "missing ${path#\?}" # the build will say so
      continue
    fi
    (cd "$2" && find "$path" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' ! -path '*.egg-info/*' -print0 |
      sort -z | xargs -0 -r sha256sum)
  done
}

# inputs_hash DOCKERFILE CONTEXT PARENT_HASH BUILD_ARGS...: what a rebuild depends on.
inputs_hash() {
  local dockerfile=$1 context=$2 parent=$3
  shift 3
  {
    printf 'recipe %s\nparent %s\n' "$RECIPE" "$parent"
    printf 'arg %s\n' "$@"
    cat "$dockerfile"
    context_files "$dockerfile" "$context"
    if grep -q PIP_FIND_LINKS "$dockerfile"; then ls "$WHEELS"; fi
  } | sha
}

archive() { printf '%s/%s.tar' "$ARCHIVES" "$1"; }

# current FILE HASH: the archive exists and was built from these inputs.
current() { [[ -f "$(archive "$1")" && "$(cat "$ARCHIVES/$1.inputs" 2>/dev/null)" == "$2" ]]; }

# ensure_parent IMAGE FILE: IMAGE in buildah's storage, loaded from its archive (which
# keeps its name) if absent.
ensure_parent() {
  bah inspect --type image "$1" >/dev/null 2>&1 && return 0
  run bah pull --quiet "docker-archive:$(archive "$2")"
}

# export_image IMAGE FILE HASH: write the docker-archive (tagged IMAGE) and its inputs hash.
export_image() {
  local out
  out=$(archive "$2")
  rm -f "$out.tmp"
  run bah push --quiet "$1" "docker-archive:$out.tmp:$1"
  mv -f "$out.tmp" "$out"
  printf '%s\n' "$3" >"$ARCHIVES/$2.inputs"
  BUILT+=("$1")
}

# build FILE IMAGE DOCKERFILE CONTEXT PARENT BUILD_ARGS...: build IMAGE from DOCKERFILE
# unless its archive (archives/FILE.tar) is current. PARENT is the image it starts FROM:
# the base, or one built before it (its archive file is in FILE_OF).
build() {
  local file=$1 image=$2 dockerfile=$3 context=$4 parent=$5 parent_hash hash t0=$SECONDS args=()
  shift 5
  if grep -q PIP_FIND_LINKS "$dockerfile"; then need_wheels; fi
  if [[ $parent == "$BASE" ]]; then
    parent_hash=$(cat "$BASE_TAR.sha256")
  else
    parent_hash=$(cat "$ARCHIVES/${FILE_OF[$parent]}.inputs")
  fi
  hash=$(inputs_hash "$dockerfile" "$context" "$parent_hash" "$@")
  FILE_OF[$image]=$file
  LISTED+=("$image	$(archive "$file")")
  if current "$file" "$hash"; then
    say "$image: up to date"
    return 0
  fi
  say "$image: building from ${dockerfile#"$REPO"/}…"
  if [[ $parent == "$BASE" ]]; then ensure_base; else ensure_parent "$parent" "${FILE_OF[$parent]}"; fi
  local a
  for a in "$@"; do args+=(--build-arg "$a"); done
  if grep -q PIP_FIND_LINKS "$dockerfile"; then
    args+=(--build-arg PIP_NO_INDEX=1 --build-arg PIP_FIND_LINKS=/wheelhouse -v "$WHEELS:/wheelhouse:ro")
  fi
  run bah bud --pull=never --format docker --isolation chroot --layers=false \
    -f "$dockerfile" -t "$image" "${args[@]}" "$context"
  export_image "$image" "$file" "$hash"
  say "$image: built in $((SECONDS - t0)) s"
}

# The sandbox image: one static file, so no Dockerfile (FROM scratch, COPY, ENTRYPOINT).
build_pause() {
  local image=localhost/lockgate-test/pause:3.2 hash c
  if [[ ! -x "$PAUSE_BIN" ]]; then
    say "$image: skipped, $PAUSE_BIN is not built yet (hack/envtest.sh builds it); run again once it is"
    return 0
  fi
  hash=$({ printf 'recipe %s\n' "$RECIPE"; sha256sum <"$PAUSE_BIN"; } | sha)
  LISTED+=("$image	$(archive pause)")
  if current pause "$hash"; then
    say "$image: up to date"
    return 0
  fi
  say "$image: packing $PAUSE_BIN…"
  c=$(bah from --pull=never scratch)
  run bah copy "$c" "$PAUSE_BIN" /pause
  run bah config --entrypoint '["/pause"]' --cmd '' "$c"
  run bah commit --rm --format docker "$c" "$image"
  export_image "$image" pause "$hash"
}

# A static busybox (Debian's busybox-static) as /bin/busybox in a scratch image: the
# flashboot helper (operator.helperImages.busybox), which copies it next to the worker image
# and runs `busybox true` there. The .deb is downloaded, not installed.
build_busybox() {
  local image=localhost/lockgate-test/busybox:static hash c deb debs="$CACHE/debs"
  mkdir -p "$debs"
  if ! compgen -G "$debs/busybox-static_*.deb" >/dev/null; then
    (cd "$debs" && run apt-get download busybox-static)
  fi
  deb=$(compgen -G "$debs/busybox-static_*.deb" | tail -n 1)
  hash=$({ printf 'recipe %s\n' "$RECIPE"; sha256sum <"$deb"; } | sha)
  LISTED+=("$image	$(archive busybox)")
  if current busybox "$hash"; then
    say "$image: up to date"
    return 0
  fi
  say "$image: packing $(basename "$deb")…"
  rm -rf "$CACHE/tmp/busybox"
  run dpkg-deb -x "$deb" "$CACHE/tmp/busybox"
  c=$(bah from --pull=never scratch)
  run bah copy "$c" "$CACHE/tmp/busybox/bin/busybox" /bin/busybox
  run bah config --entrypoint '["/bin/busybox"]' --cmd '' "$c"
  run bah commit --rm --format docker "$c" "$image"
  export_image "$image" busybox "$hash"
}

# Redis and pause first: they need no wheels, which may still be downloading.
build_all() {
  local cpu="registry.example.com/lockgate/worker:$VERSION-cpu"
  build redis localhost/lockgate-test/redis:7 \
    "$REPO/tests/images/redis.Dockerfile" "$REPO/tests/images" "$BASE" "BASE_IMAGE=$BASE"
  build_pause
  build_busybox
  build control-plane "registry.example.com/lockgate/control-plane:$VERSION" \
    "$REPO/images/control-plane.Dockerfile" "$REPO" "$BASE" "PYTHON_IMAGE=$BASE"
  build worker-cpu "$cpu" "$REPO/images/worker.Dockerfile" "$REPO" "$BASE" \
    "BASE_IMAGE=$BASE" "BUILD_IMAGE=$BASE"
  build echo "registry.example.com/lockgate-echo:$VERSION" \
    "$REPO/examples/echo/Dockerfile" "$REPO/examples/echo" "$cpu" "WORKER_IMAGE=$cpu"
  build streaming "registry.example.com/lockgate-streaming:$VERSION" \
    "$REPO/examples/streaming/Dockerfile" "$REPO/examples/streaming" "$cpu" "WORKER_IMAGE=$cpu"
  build lb-example "registry.example.com/lockgate-lb-example:$VERSION" \
    "$REPO/examples/loadbalancer/Dockerfile" "$REPO/examples/loadbalancer" "$BASE" "PYTHON_IMAGE=$BASE"
  build builder "registry.example.com/lockgate/builder:$VERSION" \
    "$REPO/images/builder.Dockerfile" "$REPO" "$BASE" "BASE_IMAGE=$BASE"
  build runpod-worker localhost/lockgate-test/runpod-worker:dev \
    "$REPO/tests/images/runpod-worker.Dockerfile" "$REPO/tests/workers" "$BASE" \
    "PYTHON_IMAGE=$BASE" "RUNPOD_REQUIREMENT=$(runpod_requirement)"
}

# Built images live on in their archives only: buildah's vfs storage keeps a full copy of
# the file system per layer, so it is emptied after every run that built something.
clean_storage() {
  [[ -d "$STORE" ]] || return 0
  bah rm --all >>"$LOG" 2>&1 || true
  bah rmi --all --force >>"$LOG" 2>&1 || true
  rm -rf "$STORE" "$CACHE/run" "$CACHE/tmp"
}

# At exit: stop a wheel download still running (after an error), and remove the
# blob-info cache buildah 1.28 keeps in /var/lib/containers/cache whatever --root says,
# when this run made that folder.
on_exit() {
  if [[ -n ${WHEELS_PID:-} ]]; then
    pkill -P "$WHEELS_PID" 2>/dev/null || true
    kill "$WHEELS_PID" 2>/dev/null || true
  fi
  if [[ $MADE_VAR_LIB == 1 ]]; then
    rm -f /var/lib/containers/cache/blob-info-cache-v1.boltdb
    rmdir /var/lib/containers/cache /var/lib/containers 2>/dev/null || true
  fi
}

write_list() {
  printf '%s\n' "${LISTED[@]}" >"$CACHE/images.list.tmp"
  mv -f "$CACHE/images.list.tmp" "$CACHE/images.list"
}

main() {
  declare -g T0=$SECONDS WHEELS_PID='' MADE_VAR_LIB=0
  declare -gA FILE_OF=()
  declare -ga LISTED=() BUILT=()
  mkdir -p "$CACHE"
  # One build at a time per cache dir (parallel test sessions, CI retries).
  exec 9>"$CACHE/.lock"
  flock 9
  : >"$LOG"
  [[ -e /var/lib/containers ]] || MADE_VAR_LIB=1
  trap on_exit EXIT
  install_pkgs "${TOOLS[@]}"
  mkdir -p "$ARCHIVES" "$CACHE/tmp"
  if ! wheels_ready; then
    say "downloading wheels for the builds into $WHEELS in the background (log: $CACHE/wheels.log)…"
    fetch_wheels &
    WHEELS_PID=$!
  fi
  make_base_tar
  build_all
  write_list
  if [[ ${#BUILT[@]} -gt 0 ]]; then
    clean_storage
    say "built ${#BUILT[@]} image(s) in $((SECONDS - T0)) s; archives: $(du -sh "$ARCHIVES" | cut -f1)"
  fi
  say "${#LISTED[@]} images listed in $CACHE/images.list"
}

main "$@"
