#!/usr/bin/env bash
# Install, once, the scanner `make chart-scan` (tests/test_chart_scan.py) runs on the chart:
# checkov, pinned, from PyPI, into a venv of its own in the tools cache folder:
#
#   ${LOCKGATE_TOOLS_DIR:-$HOME/.cache/lockgate-tools}/checkov-venv/bin/checkov
#
# Not an extra of pyproject.toml: checkov pins its dependencies tightly (packaging<24,
# boto3==1.35.49, networkx<2.7, …), and installed beside the `test` extra it would
# downgrade what the project's own tests run on. Idempotent: when the pinned version is
# there, it says so and exits at once. A cold install writes about 300 MB.
set -euo pipefail

CHECKOV_VERSION=3.3.30
PYTHON="${PYTHON:-python3}"

CACHE="${LOCKGATE_TOOLS_DIR:-$HOME/.cache/lockgate-tools}"
VENV="$CACHE/checkov-venv"
LOG="$CACHE/checkov-install.log"

TAG=checkov
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ready() {
  [[ -x "$VENV/bin/checkov" ]] &&
    [[ "$("$VENV/bin/checkov" --version 2>/dev/null)" == "$CHECKOV_VERSION" ]]
}

main() {
  local t0=$SECONDS
  if ready; then
    say "checkov $CHECKOV_VERSION ready in $VENV"
    return 0
  fi
  mkdir -p "$CACHE"
  # One install at a time per cache dir (parallel test sessions, CI retries).
  exec 9>"$CACHE/.checkov.lock"
  flock 9
  if ready; then
    say "checkov $CHECKOV_VERSION ready in $VENV"
    return 0
  fi
  : >"$LOG"
  say "installing checkov $CHECKOV_VERSION into $VENV (pip)…"
  rm -rf "$VENV"
  run "$PYTHON" -m venv "$VENV"
  run "$VENV/bin/python" -m pip install -q --upgrade pip
  run "$VENV/bin/python" -m pip install -q "checkov==$CHECKOV_VERSION"
  ready || die "$VENV/bin/checkov is not checkov $CHECKOV_VERSION"
  say "done in $((SECONDS - t0)) s"
  say "checkov $CHECKOV_VERSION ready in $VENV"
}

main "$@"
