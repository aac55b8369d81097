#!/usr/bin/env bash
# Install what the /metrics tests need: Debian's Prometheus (prometheus and promtool, 2.42 on bookworm). The tests
# start their own Prometheus on loopback with a scrape config in a temporary directory; the package's own service is
# not used (with no init system, or with policy-rc.d, it is never started).
set -euo pipefail
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y --no-install-recommends prometheus
fi
prometheus --version | head -1
