# srap's maintainer actions: the one body both packages run. xtask
# (xtask/src/package/scripts.rs) makes the .deb's postinst, prerm and
# postrm and the .rpm's %post, %preun and %postun from this file, each
# followed by the calls its package manager's arguments select (dpkg passes
# configure/remove/purge, rpm the number of versions left: 1 or 2, 0 on
# erase). Nothing here enables or starts a unit: the agents need their
# flags in /etc/srap/*.conf first.
set -e

SRAP_UNITS="srap-receiver.service srap-sender.service"
SRAP_PSK=/etc/srap/psk

# Installed or upgraded: make the pre-shared key the settings name on
# first install (32 random bytes, base64, readable by root only; an
# existing key is never replaced: copy the receivers' over it on the
# senders), then make a running systemd see the (new) units.
srap_installed() {
    if [ ! -e "$SRAP_PSK" ]; then
        (
            umask 077
            # Step by step, not a pipe: `set -e` sees each failure (no
            # /dev/urandom must not leave an empty key).
            head -c 32 /dev/urandom > "$SRAP_PSK.raw"
            base64 "$SRAP_PSK.raw" > "$SRAP_PSK.new"
            rm -f "$SRAP_PSK.raw"
            mv "$SRAP_PSK.new" "$SRAP_PSK"
        )
    fi
    srap_reload_systemd
}

# About to be removed (not upgraded): stop the agents whose binary is about
# to go and drop the enable links an administrator made. Steering the
# sender agent pinned stays until `srap-agent detach`.
srap_removing() {
    if [ -d /run/systemd/system ]; then
        # shellcheck disable=SC2086
        systemctl stop $SRAP_UNITS || true
    fi
    if command -v systemctl >/dev/null 2>&1; then
        # Works without a running systemd too (it edits the links).
        # shellcheck disable=SC2086
        systemctl --no-reload disable $SRAP_UNITS >/dev/null 2>&1 || true
    fi
}

# Removed for good (dpkg's purge, rpm's erase): delete the key
# srap_installed made; the package manager deletes the settings.
srap_purged() {
    rm -f "$SRAP_PSK" "$SRAP_PSK.new" "$SRAP_PSK.raw"
    rmdir /etc/srap 2>/dev/null || true
}

# Removed: make a running systemd forget the units.
srap_removed() {
    srap_reload_systemd
}

srap_reload_systemd() {
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload || true
    fi
}
