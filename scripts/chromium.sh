# shellcheck shell=bash
# Finds Chromium for the status page's browser tests, for scripts/test.sh,
# which sources this file. chromium_ensure installs Debian's chromium
# package when it is missing and exports its path in LOADSHED_CHROMIUM.
#
#   . scripts/chromium.sh
#   chromium_ensure test.sh       # the argument prefixes the messages

chromium_ensure() {
  local who=${1:-chromium.sh}
  if [ -n "${LOADSHED_CHROMIUM:-}" ] && [ -x "$LOADSHED_CHROMIUM" ]; then
    export LOADSHED_CHROMIUM
    return
  fi
  local path
  path=$(command -v chromium || command -v chromium-browser || true)
  if [ -z "$path" ]; then
    echo "$who: installing chromium from Debian's packages" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
    path=$(command -v chromium)
  fi
  export LOADSHED_CHROMIUM="$path"
}
