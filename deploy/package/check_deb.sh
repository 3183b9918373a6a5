#!/usr/bin/env bash
# The .deb as a user gets it: packed by CPack from the build folder ($1), installed with apt into
# a clean Debian 12 root (mmdebstrap; apt must resolve every dependency the package declares).
# In that root the installed unit passes systemd-analyze verify, the sysusers groups exist, and
# wsyncd starts from the installed path with the installed config (in host mode: no GPU here)
# and answers wsyncctl. Needs root (mmdebstrap's root mode) and Debian's mirrors.
set -euo pipefail
if [[ $(id -u) -ne 0 ]]; then
  echo "check_deb.sh: needs root (mmdebstrap's root mode builds the Debian root)" >&2
  exit 1
fi
build=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cpack --config "$build/CPackConfig.cmake" -B "$work" >"$work/cpack.log" ||
  { cat "$work/cpack.log"; exit 1; }
deb=$(ls "$work"/wsync_*.deb)
echo "package: $(basename "$deb")"
dpkg-deb --field "$deb" Depends
contents=$(dpkg-deb --contents "$deb")
for path in ./usr/bin/wsyncd ./usr/bin/wsyncctl ./usr/lib/systemd/system/wsyncd.service \
    ./usr/lib/sysusers.d/wsync.conf ./etc/wsync/wsyncd.json; do
  grep -q " $path\$" <<<"$contents" || { echo "the package lacks $path"; exit 1; }
done
cat >"$work/inside.sh" <<'INSIDE'
set -euo pipefail
grep -q '^ExecStart=/usr/bin/wsyncd --config /etc/wsync/wsyncd.json' \
  /usr/lib/systemd/system/wsyncd.service
out=$(systemd-analyze verify /usr/lib/systemd/system/wsyncd.service 2>&1) || { echo "$out"; exit 1; }
[ -z "$out" ] || { echo "systemd-analyze verify: $out"; exit 1; }
getent group wsync wsync-admin
ldconfig -p | grep -q 'libwsync_client.so ' || { echo "libwsync_client.so is not in ld.so's cache"; exit 1; }
mountpoint -q /dev/shm || { mkdir -p /dev/shm && mount -t tmpfs tmpfs /dev/shm; }
/usr/bin/wsyncd --config /etc/wsync/wsyncd.json --mode host --socket /tmp/wsyncd.sock \
  --state-dir /tmp/wsync-state >/tmp/wsyncd.log 2>&1 &
pid=$!
for _ in $(seq 100); do [ -S /tmp/wsyncd.sock ] && break; sleep 0.1; done
/usr/bin/wsyncctl --socket /tmp/wsyncd.sock status || { cat /tmp/wsyncd.log; exit 1; }
kill "$pid"
wait "$pid" || true
echo "installed wsyncd started and answered"
INSIDE
mmdebstrap --quiet --mode=root --variant=apt --include=systemd \
  --customize-hook="copy-in $deb $work/inside.sh /tmp" \
  --customize-hook="chroot \"\$1\" apt-get install -y -qq /tmp/$(basename "$deb")" \
  --customize-hook='chroot "$1" bash /tmp/inside.sh' \
  bookworm /dev/null \
  "deb http://deb.debian.org/debian bookworm main" \
  "deb http://deb.debian.org/debian bookworm-updates main" \
  "deb http://deb.debian.org/debian-security bookworm-security main"
