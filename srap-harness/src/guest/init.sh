#!/bin/busybox sh
# /init of SRAP's lab guest. Loads the NIC's modules, configures eth0 from
# `srap.ip=ADDR/PREFIX` on the kernel command line (if given), says SRAP-GUEST-READY on
# the console, then runs each line read from the second serial port as a
# shell command, answering with its output and
# `SRAP-END <line sum> <output sum> <exit code>` (CRC-32s, busybox `crc32`,
# of the line as read and of the output, so the host can tell a garbled
# exchange); the line
# `SRAP-RESEND` sends the last reply again without running anything.
# `srap.nodiag` removes the modules of sock_diag for TCP (inet_diag,
# tcp_diag): a kernel without them; `srap.nokey` hides netdev_rss_key.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
# cgroup2: the sender agent steers a cgroup (it mounts bpffs itself).
mkdir -p /sys/fs/cgroup
mount -t cgroup2 cgroup2 /sys/fs/cgroup
if grep -qw srap.nodiag /proc/cmdline; then
  rm -rf /lib/modules/*/kernel/net/ipv4
fi
# Modules in any order: each pass loads those whose dependencies are in.
for pass in 1 2 3 4; do
  for module in /lib/modules/*.ko; do
    [ -e "$module" ] && insmod "$module" 2>/dev/null && rm "$module"
  done
done
for module in /lib/modules/*.ko; do
  [ -e "$module" ] && echo "SRAP-GUEST-ERROR module $module did not load"
done
ip link set lo up
address=$(tr ' ' '\n' < /proc/cmdline | sed -n 's/^srap.ip=//p')
# Without srap.ip (a NUMA guest), the host addresses each NIC by its MAC.
if [ -n "$address" ]; then
  ip link set eth0 up
  ip addr add "$address" dev eth0
fi
# `srap.nokey`: the kernel's default RSS key unreadable, as outside the
# initial network namespace. Only once the NIC is up: igb fills its key from
# it when it opens. A copy is kept for the lab's own judging, in /run.
if grep -qw srap.nokey /proc/cmdline; then
  cat /proc/sys/net/core/netdev_rss_key > /run/netdev_rss_key
  mount --bind /dev/null /proc/sys/net/core/netdev_rss_key
fi
# One descriptor for the whole session, opened and in raw mode before the
# host hears READY: a UART drops what arrives while nothing holds it open,
# and `stty` may flush what cooked mode queued. The host sends its first
# command as soon as it reads READY; a slow guest that opened the port
# after that lost the line and left the host waiting out its timeout.
exec 3<>/dev/ttyS1
stty -F /dev/ttyS1 raw -echo
echo SRAP-GUEST-READY
while true; do
  IFS= read -r line <&3 || continue
  if [ "$line" != SRAP-RESEND ]; then
    sh -c "$line" > /tmp/.out 2>&1 < /dev/null
    rc=$?
    linesum=$(printf '%s' "$line" | crc32)
    sum=$(crc32 < /tmp/.out)
  fi
  cat /tmp/.out >&3
  echo "SRAP-END $linesum $sum $rc" >&3
done
