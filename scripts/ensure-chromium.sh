#!/usr/bin/env bash
# Makes sure Debian's Chromium is installed for the web client's browser tests (never a browser
# downloaded by Playwright). Without root or apt-get it only says so: the tests then fail in CI
# (CI=true) with the same reason and are skipped elsewhere.
set -uo pipefail
for p in "${SHINE_CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser; do
  if [ -n "$p" ] && [ -x "$p" ]; then exit 0; fi
done
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing chromium (apt-get) for the browser tests" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
    || echo "warning: apt-get install chromium failed; browser tests cannot run" >&2
else
  echo "warning: no Chromium and no root apt-get to install it; browser tests cannot run" >&2
fi
exit 0
