#!/usr/bin/env bash
# Build localhost/frenzy:dev for compose.podman.yaml without any image registry:
#   1. a Debian bookworm base by debootstrap (skipped when localhost/frenzy-base:bookworm exists),
#   2. a wheelhouse of Frenzy and its dependencies by `pip wheel` on the host, at the versions
#      of constraints.txt (what the tests ran with),
#   3. the image from Containerfile.podman, `pip install --no-index` from that wheelhouse.
# Needs root, podman, debootstrap, and a Debian mirror and PyPI (or pip's cache) on the host.
# Usage: deploy/compose/podman-build.sh [PYTHON]   (PYTHON: the host's Python 3.11, default .venv's)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
python="${1:-$root/.venv/bin/python}"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if ! podman image exists localhost/frenzy-base:bookworm; then
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm \
        "$work/rootfs" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$work/debootstrap.log" \
        || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
    tar -C "$work/rootfs" -c . | podman import - localhost/frenzy-base:bookworm >/dev/null
    rm -rf "$work/rootfs"
fi
mkdir -p "$work/ctx"
"$python" -m pip wheel --quiet -c "$root/constraints.txt" --wheel-dir "$work/ctx/wheelhouse" "$root" 2>"$work/wheel.log" \
    || { tail -20 "$work/wheel.log" >&2; exit 1; }
cp "$here/Containerfile.podman" "$work/ctx/Containerfile"
# --isolation chroot: RUN steps under the OCI runtime fail on this host's cgroups (containers.conf).
podman build --quiet --isolation chroot -t localhost/frenzy:dev "$work/ctx"
