# A mini-cluster node: the debootstrap base (docker/build-base.sh) plus squall built
# inside the image, against this image's own Slurm headers and Python.
ARG RELEASE=trixie
ARG BASE=squall-base:${RELEASE}
FROM ${BASE}

# The test users, same uids on every node, homes on the shared /fsx: squall, and alice, bob
# and carol, other users of the same image cache (alice plays the attacker; bob alone has
# credentials for the private registry, login:5001; docs/cluster.md).
RUN for u in squall:1000 alice:1001 bob:1002 carol:1003; do \
      groupadd -g "${u#*:}" "${u%:*}" \
      && useradd -u "${u#*:}" -g "${u#*:}" -d "/fsx/home/${u%:*}" -M -s /bin/bash "${u%:*}" \
      || exit 1; \
    done \
 && dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none \
 && chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key

COPY docker/node-init.sh /usr/local/sbin/squall-node-init
COPY docker/registry.yml docker/registry-private.yml docker/registry-mirror.yml \
     docker/registry-mirror-push.yml /etc/squall/
COPY docker/registries.conf /etc/containers/registries.conf
# The private registry's one account, bob, with a password made for this image (test
# cluster only): root's copy for the tests' pushes, the bcrypt line for the registry;
# node-init gives bob his Enroot credentials from it.
COPY docker/registry-htpasswd.py /tmp/registry-htpasswd.py
RUN umask 077 && head -c 18 /dev/urandom | base64 | tr '+/' '-_' >/etc/squall/registry-private.password \
 && python3 /tmp/registry-htpasswd.py bob </etc/squall/registry-private.password \
      >/etc/squall/registry-private.htpasswd \
 && head -c 18 /dev/urandom | base64 | tr '+/' '-_' >/etc/squall/registry-mirror.password \
 && python3 /tmp/registry-htpasswd.py root </etc/squall/registry-mirror.password \
      >/etc/squall/registry-mirror.htpasswd \
 && rm /tmp/registry-htpasswd.py
COPY docker/slurm/ /etc/slurm/

# NVIDIA Enroot, built from its release tarball (docker/enroot/build-enroot.sh; build-images.sh
# copies the tarball in), with the mini cluster's settings and Enroot's Slurm PMI hook
# enabled as sites enable it. Before squall's own layer: rebuilt only when Enroot changes.
COPY docker/enroot/ /tmp/enroot/
RUN bash /tmp/enroot/build-enroot.sh /tmp/enroot/enroot.tar.gz \
 && install -m 0644 /tmp/enroot/enroot.conf /etc/enroot/enroot.conf \
 && install -m 0755 /usr/share/enroot/hooks.d/50-slurm-pmi.sh /etc/enroot/hooks.d/ \
 && rm -rf /tmp/enroot

# squall from its Debian packages, built here (debhelper) against this image's Slurm headers
# and Python, and installed with dpkg: the integration tests test the packages. The
# squall_steps hook goes into Enroot's hooks.d as a site installs it (enroot/README.md).
COPY . /opt/squall/src
WORKDIR /opt/squall/src
RUN bash packaging/build-debs.sh /opt/squall/debs \
 && dpkg -i /opt/squall/debs/squall-slurm-plugin_*.deb /opt/squall/debs/python3-squall_*.deb \
 && test "$(stat -c '%U %G %a' /var/lib/squall-builder)" = "squall-builder squall-builder 700" \
 && test "$(getent passwd squall-builder | cut -d: -f7)" = /usr/sbin/nologin \
 && bash docker/write-plugstack.sh /etc/slurm/plugstack.conf \
 && install -m 0755 /usr/share/squall/enroot/hooks.d/91-squall-steps.sh /etc/enroot/hooks.d/ \
 && rm -f /opt/squall/debs/*-dbgsym_*.deb && rm -rf /opt/squall/src
WORKDIR /
ENTRYPOINT ["/usr/local/sbin/squall-node-init"]
