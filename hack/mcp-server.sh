#!/usr/bin/env bash
# Install, once, RunPod's MCP server that the MCP tests (tests/test_mcp_*.py) drive over
# stdio: the npm package @runpod/mcp-server at exactly 4.0.0, with the whole dependency
# tree pinned by hack/mcp-server/package-lock.json, into a cache folder outside the repo:
#
#   ${LOCKGATE_TOOLS_DIR:-$HOME/.cache/lockgate-tools}/mcp-server/node_modules/.bin/runpod-mcp
#
# `npm ci` installs exactly the committed lock (each tarball checked against its
# integrity hash), without running any package's install scripts. Idempotent: when the
# installed tree was made from the same lock, it says so and exits at once. Needs Node.js
# >= 20 (the package's `engines`) and npm. A cold install writes 41 MB (112 packages).
# The lock holds no registry URLs (integrity hashes only), so npm fetches from the registry
# it is configured with.
set -euo pipefail

MCP_PKG=@runpod/mcp-server
MCP_VERSION=4.0.0
NODE_MAJOR_MIN=20
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/mcp-server" && pwd)"

CACHE="${LOCKGATE_TOOLS_DIR:-$HOME/.cache/lockgate-tools}"
DIR="$CACHE/mcp-server"
BIN="$DIR/node_modules/.bin/runpod-mcp"
INSTALL_LOG="$CACHE/mcp-server-install.log"
LOG=""  # set once an install starts: an earlier install's log says nothing about this run

TAG=mcp
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The installed tree is the committed lock's: same lock file, the pinned version, the binary.
ready() {
  [[ -x "$BIN" ]] && cmp -s "$SRC/package-lock.json" "$DIR/package-lock.json" &&
    [[ "$(node -p "require('$DIR/node_modules/$MCP_PKG/package.json').version" 2>/dev/null)" \
      == "$MCP_VERSION" ]]
}

# node >= 20 (to run it), or a message naming what is missing.
check_node() {
  local version major
  command -v node >/dev/null ||
    die "needs Node.js >= $NODE_MAJOR_MIN (no \`node\` on PATH): install it, e.g. Debian 13's nodejs or NodeSource's nodejs 20+"
  version="$(node --version)"
  major="${version#v}"
  major="${major%%.*}"
  ((major >= NODE_MAJOR_MIN)) ||
    die "needs Node.js >= $NODE_MAJOR_MIN, found node $version at $(command -v node) ($MCP_PKG $MCP_VERSION's engines)"
}

main() {
  local t0=$SECONDS
  check_node
  if ready; then
    say "$MCP_PKG $MCP_VERSION ready: $BIN"
    return 0
  fi
  mkdir -p "$CACHE"
  # One install at a time per cache dir (parallel test sessions, CI retries).
  exec 9>"$CACHE/.mcp-server.lock"
  flock 9
  if ready; then
    say "$MCP_PKG $MCP_VERSION ready: $BIN"
    return 0
  fi
  command -v npm >/dev/null ||
    die "needs npm beside node $(node --version) to install $MCP_PKG (no \`npm\` on PATH): install Debian's npm package or NodeSource's nodejs"
  LOG="$INSTALL_LOG"
  : >"$LOG"
  say "installing $MCP_PKG $MCP_VERSION into $DIR (npm ci)…"
  rm -rf "$DIR"
  mkdir -p "$DIR"
  cp "$SRC/package.json" "$SRC/package-lock.json" "$DIR/"
  run npm ci --prefix "$DIR" --ignore-scripts --no-audit --no-fund
  ready || die "$BIN is not $MCP_PKG $MCP_VERSION after npm ci"
  say "done in $((SECONDS - t0)) s"
  say "$MCP_PKG $MCP_VERSION ready: $BIN"
}

main "$@"
