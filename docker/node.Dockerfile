# A mini-cluster node: the debootstrap base (docker/build-base.sh) plus squall built
# inside the image, against this image's own Slurm headers and Python.
ARG RELEASE=trixie
ARG BASE=squall-base:${RELEASE}
FROM ${BASE}

# The test users, same uids on every node, homes on the shared /fsx: squall, and alice, a
# second user of the same image cache (docs/sqshbuild.md, "Permissions").
RUN groupadd -g 1000 squall \
 && useradd -u 1000 -g 1000 -d /fsx/home/squall -M -s /bin/bash squall \
 && groupadd -g 1001 alice \
 && useradd -u 1001 -g 1001 -d /fsx/home/alice -M -s /bin/bash alice \
 && dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none \
 && chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key

COPY docker/node-init.sh /usr/local/sbin/squall-node-init
COPY docker/registry.yml /etc/squall/registry.yml
COPY docker/registries.conf /etc/containers/registries.conf
COPY docker/slurm/ /etc/slurm/

# Optional: real Enroot packages supplied by the user (docker/enroot-debs/*.deb) replace
# the test runtime. Empty by default.
COPY docker/enroot-debs/ /tmp/enroot-debs/
RUN if ls /tmp/enroot-debs/*.deb >/dev/null 2>&1; then \
      apt-get install -y --no-install-recommends /tmp/enroot-debs/*.deb && touch /etc/squall/real-enroot; \
    fi; rm -rf /tmp/enroot-debs

# squall from its Debian packages, built here (debhelper) against this image's Slurm headers
# and Python, and installed with dpkg: the integration tests test the packages.
COPY . /opt/squall/src
WORKDIR /opt/squall/src
RUN bash packaging/build-debs.sh /opt/squall/debs \
 && dpkg -i /opt/squall/debs/squall-slurm-plugin_*.deb /opt/squall/debs/python3-squall_*.deb \
 && bash docker/write-plugstack.sh /etc/slurm/plugstack.conf \
 && bash tests/enroot_test_runtime/install.sh \
 && rm -f /opt/squall/debs/*-dbgsym_*.deb && rm -rf /opt/squall/src
WORKDIR /
ENTRYPOINT ["/usr/local/sbin/squall-node-init"]
