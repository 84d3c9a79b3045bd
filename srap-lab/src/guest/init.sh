#!/bin/busybox sh
# /init of SRAP's lab guest. Loads the NIC's modules, configures eth0 from
# `srap.ip=ADDR/PREFIX` on the kernel command line, says SRAP-GUEST-READY on
# the console, then runs each line read from the second serial port as a
# shell command, answering with its output and `SRAP-RC <exit code>`.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
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
ip link set eth0 up
ip addr add "$address" dev eth0
echo SRAP-GUEST-READY
# One descriptor for the whole session: closing the tty between commands
# would drop what the host sends meanwhile.
exec 3<>/dev/ttyS1
stty -F /dev/ttyS1 raw -echo
while true; do
  IFS= read -r line <&3 || continue
  sh -c "$line" > /tmp/.out 2>&1 < /dev/null
  rc=$?
  cat /tmp/.out >&3
  echo "SRAP-RC $rc" >&3
done
