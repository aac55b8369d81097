#!/usr/bin/env bash
# Install what the browser tests need: Debian's Chromium (apt) and playwright-core (npm ci, from the lockfile).
# playwright-core never downloads a browser; the tests drive /usr/bin/chromium (or $CHROMIUM_PATH).
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x "${CHROMIUM_PATH:-/usr/bin/chromium}" ]; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y chromium
fi
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund
"${CHROMIUM_PATH:-/usr/bin/chromium}" --version
