# The mini cluster's PyTorch image, login:5000/squall/pytorch:2.6 (docs/cluster.md): Debian's
# own python3-torch (a CPU build with the gloo backend, torchrun and Open MPI), cut down to
# what a CPU run loads (docker/pytorch-rootfs.sh). Built by docker/build-pytorch.sh, cached
# by content; pushed to the login node's registry by docker/push-image.py.
ARG RELEASE=trixie
ARG BASE=squall-base:${RELEASE}
FROM ${BASE} AS build
RUN apt-get -o Acquire::Check-Valid-Until=false update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-torch \
 && apt-get clean && rm -rf /var/lib/apt/lists/*
COPY docker/pytorch-rootfs.sh docker/pytorch-nolibuv.py /usr/local/lib/squall-pytorch/
RUN sh /usr/local/lib/squall-pytorch/pytorch-rootfs.sh /out

FROM scratch
COPY --from=build /out/ /
ENV PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 USE_LIBUV=0
WORKDIR /
CMD ["python3"]
