#!/bin/sh
# The image's entrypoint: runs `mesh` with the container's arguments (`api ...`, `sidecar ...`).
#
# - The root file system may be read-only: mesh writes only under $MESH_HOME (the local registry,
#   the broker's secret, the mesh CA; default /var/lib/mesh, a volume) and $TMPDIR. A MESH_HOME
#   that cannot be written is reported here, before mesh starts, with what to mount (exit 78).
# - `exec`: node replaces this shell, so SIGTERM from `docker stop` or the kubelet reaches mesh
#   itself, which drains (keeps serving for --drain_delay, finishes in-flight requests for up to
#   --drain_timeout) and exits 0, or 1 when requests had to be cut off. A second signal exits at once.
# - The app is found next to this script (../dist/src/cli/main.js), /app in the image.
set -eu
app=$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)
: "${MESH_HOME:=/var/lib/mesh}"
export MESH_HOME
if [ ! -d "$MESH_HOME" ]; then
  (umask 077 && mkdir -p -- "$MESH_HOME") 2>/dev/null || {
    echo "mesh: cannot create MESH_HOME=$MESH_HOME: mount a writable volume there (the root file system is read-only)" >&2
    exit 78
  }
fi
if [ ! -w "$MESH_HOME" ]; then
  echo "mesh: MESH_HOME=$MESH_HOME is not writable by uid $(id -u): mount a writable volume there (the root file system is read-only)" >&2
  exit 78
fi
exec node "$app/dist/src/cli/main.js" "$@"
