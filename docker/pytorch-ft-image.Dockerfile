# login:5000/squall/pytorch-ft:2.6: the PyTorch image (pytorch-image.Dockerfile) with NVIDIA's
# ft_launcher (nvidia-resiliency-ext, from PyPI) installed beside Debian's torch, under
# /usr/local. Built by docker/build-pytorch-ft.sh from wheels it downloads on the host into
# the build context (WHEELS): PyPI has no nvidia-resiliency-ext wheel for trixie's Python
# 3.13 (cp310-cp312 and cp314 only), so its cp312 wheel, whose only compiled part is the
# CUPTI module a CPU run never loads, goes in as a py3 wheel (docs/failover.md).
ARG BASE=squall-base:trixie
ARG TORCH=squall-pytorch:trixie
FROM ${BASE} AS build
RUN apt-get -o Acquire::Check-Valid-Until=false update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-pip \
 && apt-get clean && rm -rf /var/lib/apt/lists/*
COPY wheels /wheels
# Every wheel the host resolved, as it is (no index, no resolution here; Debian's pip puts
# --prefix /usr in /usr/local/lib/python3.13/dist-packages and /usr/local/bin; what Debian's
# torch image has already, torch and numpy among them, was left out of the download), and
# the system libraries their extension modules load that the PyTorch image's cut left out
# (grpc's librt), under /usr (the image's /lib is a link to it).
# ft_launcher's c10d patch asks TCPStore for libuv unless told otherwise, which Debian's
# torch lacks (docker/pytorch-nolibuv.py): its default becomes off.
RUN python3 -m pip install -q --no-index --no-deps --no-compile --break-system-packages --ignore-installed \
      --root /out --prefix /usr /wheels/*.whl \
 && f=$(find /out -path '*nvidia_resiliency_ext/fault_tolerance/c10d_monkey_patch.py') \
 && grep -q 'params.get_as_bool("use_libuv", True)' "$f" \
 && sed -i 's/params.get_as_bool("use_libuv", True)/params.get_as_bool("use_libuv", False)/' "$f" \
 && python3 -m compileall -q -d /usr/local /out/usr/local >/dev/null \
 && find /out -name '*.so*' -type f | xargs -r ldd 2>/dev/null \
    | awk '/=>/ && $3 ~ /^\/(usr\/)?lib/ {print $3}' | sort -u | while read -r l; do \
      d=$(readlink -f "$(dirname "$l")"); mkdir -p "/out$d"; cp -L "$l" "/out$d/"; done \
 && test -x /out/usr/local/bin/ft_launcher

FROM ${TORCH}
COPY --from=build /out/ /
