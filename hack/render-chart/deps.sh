#!/usr/bin/env bash
# Install what hack/render-chart needs (Go and two Go libraries, from Debian), once.
# tests/test_chart.py renders the chart with it; without it those tests skip.
set -euo pipefail
PKGS=(golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v3-dev)
missing=()
for pkg in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "render-chart deps: installed"
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "render-chart deps: no apt-get here; the chart rendering tests will skip"
  exit 0
fi
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
