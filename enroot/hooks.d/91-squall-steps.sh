#!/bin/bash
# squall_steps in every container, for Enroot's hooks.d (docs/why-is-my-job-slow.md).
#
# Bind-mounts the host's squall_steps module (pure Python, no dependency) read-only at
# /var/run/squall/python/squall_steps (in the tmpfs Enroot mounts on /var/run before the
# hooks run: a mount point made in the image's own tree would stay there, mode 000, in a
# named container, and its owner's `enroot export` would fail on it) and appends that
# directory to the
# container's PYTHONPATH, after the user's (the image's or the job's value is kept first:
# never replaced), so `import squall_steps` works in an image without squall. Nothing is
# done when the host has no module, when the image ships its own (a squall_steps package in
# the image's PYTHONPATH wins anyway, being first), or with SQUALL_STEPS=off.
#
# SQUALL_STEPS_PYTHON: the host directory holding squall_steps/ (default
# /usr/share/squall/python, where the squall packages put it).
set -euo pipefail

src=${SQUALL_STEPS_PYTHON:-/usr/share/squall/python}
environ=${ENROOT_ENVIRON:?ENROOT_ENVIRON is not set: run this from Enroot hooks.d}
mounts=${ENROOT_MOUNTS:?ENROOT_MOUNTS is not set: run this from Enroot hooks.d}
dest=/var/run/squall/python

die() { echo "squall-steps: $*" >&2; exit 1; }

# Last value of NAME in the environment built so far; fails when absent.
env_value() {
    local line found=1
    while IFS= read -r line; do
        if [[ $line == "$1="* ]]; then value=${line#*=}; found=0; fi
    done <"$environ"
    return "$found"
}

mode=${SQUALL_STEPS:-on}
if env_value SQUALL_STEPS; then mode=$value; fi
case $mode in
    off) exit 0 ;;
    on) ;;
    *) die "SQUALL_STEPS=$mode: use on or off" ;;
esac
if [ ! -f "$src/squall_steps/__init__.py" ]; then exit 0; fi
if [[ $src =~ [[:space:]] ]]; then die "$src holds a blank, which fstab lines cannot carry: set SQUALL_STEPS_PYTHON to a path without one"; fi

printf '%s %s none x-create=dir,bind,ro,nosuid,nodev\n' "$src/squall_steps" "$dest/squall_steps" >>"$mounts"
# The value the container would have: the environment file's (image, environ.d, -e), else
# the caller's (the job's environment, which Enroot passes on).
path=${PYTHONPATH:-}
if env_value PYTHONPATH; then path=$value; fi
case ":$path:" in
    *":$dest:"*) exit 0 ;;
esac
printf 'PYTHONPATH=%s\n' "${path:+$path:}$dest" >>"$environ"
exit 0
