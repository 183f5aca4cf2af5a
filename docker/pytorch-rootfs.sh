#!/bin/sh
# The PyTorch image's root filesystem (docker/pytorch-image.Dockerfile), cut out of a Debian
# system where python3-torch is installed: Python with its standard library and every
# Debian Python package (torch, numpy, ... with their byte-compiled caches, so that
# `import torch` compiles nothing in a read-only container), torchrun, a shell and a few
# tools, and every shared library any of them loads (ldd), each under the path the
# dynamic linker found it at. Not whole packages: python3-torch's Depends close over
# ROCm's and LLVM's libraries and the C++ test programs (about 1 GB), none of which a CPU
# run loads. Usage: pytorch-rootfs.sh OUT
set -eu
out=$1
mkdir -p "$out/usr/bin" "$out/usr/lib" "$out/usr/lib64" "$out/usr/sbin" "$out/etc" \
  "$out/tmp" "$out/var/tmp" "$out/fsx" "$out/proc" "$out/sys" "$out/dev" "$out/run" "$out/root"
chmod 1777 "$out/tmp" "$out/var/tmp"
for d in bin lib lib64 sbin; do ln -s "usr/$d" "$out/$d"; done

py=$(readlink -f /usr/bin/python3)
stdlib=$(dirname "$("$py" -c 'import os; print(os.__file__)')")
# Python's trees as they are, links included; not the test suites (CPython's and the
# libtorch-test programs in torch/bin, which only torch_shm_manager of is used).
tar -C / --exclude="${stdlib#/}/test" --exclude="${stdlib#/}/idlelib" \
  --exclude="${stdlib#/}/tkinter" --exclude="${stdlib#/}/ensurepip" \
  --exclude='usr/lib/python3/dist-packages/torch/bin/*[Tt]est*' \
  --exclude='usr/lib/python3/dist-packages/torch/bin/tutorial_*' \
  --exclude='usr/lib/python3/dist-packages/torch/bin/aot_model_compiler_test' \
  -cf - "${stdlib#/}" usr/lib/python3/dist-packages | tar -C "$out" -xf -

# Debian's torch has no libuv and torchrun asks for it: docker/pytorch-nolibuv.py
"$py" "$(dirname "$0")/pytorch-nolibuv.py" "$out/usr/lib/python3/dist-packages/torch/distributed"

copy() {  # a file at the path it was found at, links followed
  [ -e "$out$1" ] && return 0
  mkdir -p "$out$(dirname "$1")"
  cp -L "$1" "$out$1"
}
bins="$py /usr/bin/torchrun /bin/sh /bin/dash /bin/bash /bin/cat /bin/ls /bin/sleep /bin/mkdir
  /bin/rm /bin/mv /bin/cp /bin/ln /bin/sync /bin/true /bin/false /bin/head /bin/tail /bin/wc
  /bin/date /bin/id /bin/uname /bin/hostname /usr/bin/env"
for b in $bins; do copy "$b"; done
ln -s "$(basename "$py")" "$out/usr/bin/python3"
# What the Python trees link to outside them (torch/lib holds links to /usr/lib's libtorch*)
find "$out/usr/lib/python3" "$out$stdlib" -type l | while read -r l; do
  src=${l#"$out"}
  t=$(readlink "$src")
  case "$t" in /*) ;; *) t=$(realpath -s "$(dirname "$src")/$t") ;; esac
  case "$t" in /usr/lib/python3*) ;; *) [ -f "$t" ] && copy "$t" ;; esac
done
# Every library any binary or extension module loads, transitively (ldd), under the path
# the loader found it at (/lib/... lands in usr/lib through the link above)
{
  for b in $bins; do echo "$b"; done
  find "$out" -xdev -type f \( -name '*.so' -o -name '*.so.*' \) | sed "s|^$out||"
} | while read -r f; do
  ldd "$f" 2>/dev/null | awk '/=>/ && $3 ~ /^\// {print $3} /^\t\/[^ ]*ld-linux/ {print $1}'
done | sort -u | while read -r lib; do copy "$lib"; done

cp -a /etc/ld.so.conf /etc/ld.so.conf.d "$out/etc/"
# (it says so of the libraries copied as files, not links: that is how they are meant)
ldconfig -X -r "$out" 2>&1 | grep -v "is not a symbolic link" >&2 || true
cp /etc/nsswitch.conf "$out/etc/"
getent passwd root nobody >"$out/etc/passwd"
getent group root nogroup >"$out/etc/group"
torch=$("$py" -c 'import torch; print(torch.__version__)')
printf 'NAME="squall pytorch"\nID=squall-pytorch\nVERSION_ID="%s"\nPRETTY_NAME="squall PyTorch %s (Debian %s python3-torch, CPU, gloo)"\n' \
  "$torch" "$torch" "$(cat /etc/debian_version)" >"$out/etc/os-release"
