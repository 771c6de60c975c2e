#!/usr/bin/env bash
# Installs Debian's chromium and chromium-driver for the dashboard's browser test
# (tests/dashboard/test_browser.py), when they are missing and this script runs as root.
#
# It never fails the caller: where it cannot install (not root, no apt-get, no network to the
# package mirror) it says why and exits 0, and the browser test then skips with that reason.
# Usage: scripts/ensure_chromium.sh        (make test calls it before pytest)
# CHROMIUM and CHROMEDRIVER name the binaries to look for (default: Debian's paths, which the
# browser test uses).
set -u

CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
CHROMEDRIVER=${CHROMEDRIVER:-/usr/bin/chromedriver}

if [ -x "$CHROMIUM" ] && [ -x "$CHROMEDRIVER" ]; then
    echo "ensure_chromium: $("$CHROMIUM" --version 2>/dev/null || echo chromium) and chromedriver already installed"
    exit 0
fi
if [ "$(id -u)" != "0" ]; then
    echo "ensure_chromium: not root, cannot apt-get install chromium chromium-driver; the browser test will be skipped"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_chromium: no apt-get on this machine; the browser test will be skipped"
    exit 0
fi

echo "ensure_chromium: installing Debian's chromium and chromium-driver (apt-get)"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get update -qq >/tmp/ensure_chromium.log 2>&1; then
    echo "ensure_chromium: apt-get update failed (see /tmp/ensure_chromium.log); the browser test will be skipped"
    exit 0
fi
if ! apt-get install -y -qq --no-install-recommends chromium chromium-driver >>/tmp/ensure_chromium.log 2>&1; then
    echo "ensure_chromium: apt-get install chromium chromium-driver failed (see /tmp/ensure_chromium.log); the browser test will be skipped"
    exit 0
fi
if [ -x "$CHROMIUM" ] && [ -x "$CHROMEDRIVER" ]; then
    echo "ensure_chromium: installed $("$CHROMIUM" --version 2>/dev/null || echo chromium)"
else
    echo "ensure_chromium: apt-get finished but $CHROMIUM or $CHROMEDRIVER is missing; the browser test will be skipped"
fi
exit 0
