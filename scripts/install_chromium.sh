#!/usr/bin/env bash
# `make test` runs this when /usr/bin/chromium is missing: the browser test (tests/test_site_in_browser.py) drives
# Debian/Ubuntu's `chromium` package through Playwright. If apt cannot install it (no apt, no root, no network),
# this says so and exits 0: the browser test then skips with a message saying the site was not checked.
set -u
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
[ -x "$CHROMIUM" ] && exit 0
echo "Chromium is missing at $CHROMIUM; installing Debian's chromium package with apt-get for the browser test."
SUDO=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo -n"; fi
fi
if command -v apt-get >/dev/null && { [ "$(id -u)" = 0 ] || [ -n "$SUDO" ]; } \
        && $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium; then
    echo "Installed: $(/usr/bin/chromium --version 2>/dev/null)"
else
    echo "Could not install Chromium with apt (it needs apt-get and root or passwordless sudo)."
    echo "The browser test will be SKIPPED: install chromium (or set CHROMIUM=/path/to/chromium) to run it."
fi
exit 0
