#!/usr/bin/env bash
# The dashboard's browser tests drive Debian's Chromium through Playwright; no
# browser is downloaded. Install the package when it is missing (needs root, as on
# CI), and say what to do otherwise.
set -eu
if [ -x /usr/bin/chromium ]; then
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    echo "browser: installing Debian's chromium"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
else
    echo "browser: /usr/bin/chromium is missing: sudo apt-get install chromium" >&2
    exit 1
fi
