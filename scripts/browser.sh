#!/usr/bin/env bash
# The dashboard's browser tests drive Debian's Chromium through Playwright; no
# browser is downloaded. The guide's session against the fake provider, which a
# test runs as written, uses curl. Install what is missing (needs root, as on CI),
# and say what to do otherwise.
set -eu
missing=""
[ -x /usr/bin/chromium ] || missing="$missing chromium"
command -v curl >/dev/null 2>&1 || missing="$missing curl"
if [ -z "$missing" ]; then
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    echo "browser: installing Debian's$missing"
    apt-get update -qq
    # shellcheck disable=SC2086  # one word per package
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
else
    echo "browser: missing:$missing: sudo apt-get install$missing" >&2
    exit 1
fi
