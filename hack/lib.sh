# Shared by the hack/ scripts (sourced, not run): say-lines, a build log, root, Debian
# packages. The sourcing script sets TAG (its say-line prefix) and LOG (its log file).

say() { printf '%s: %s\n' "$TAG" "$*"; }

# die MESSAGE: say it, with the log's last lines, and exit 1.
die() {
  say "ERROR: $*" >&2
  if [[ -s "$LOG" ]]; then
    say "last lines of $LOG:" >&2
    tail -n 40 "$LOG" >&2
  fi
  exit 1
}

# run CMD...: run a command with its output appended to the log (seconds since start first).
run() {
  printf '\n+ [%s s] %s\n' "$SECONDS" "$*" >>"$LOG"
  "$@" >>"$LOG" 2>&1 || die "command failed (exit $?): $*"
}

as_root() {
  if [[ $EUID -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null; then
    sudo "$@"
  else
    die "need root (or sudo) to run: $*"
  fi
}

# install_pkgs PKG...: apt-get install whatever of PKG... is not installed yet.
install_pkgs() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  say "installing ${missing[*]}…"
  run as_root apt-get update
  run as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}
