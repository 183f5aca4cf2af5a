# The demo's training image: a small Python root filesystem cut out of the node base image
# (no registry can be reached here), the way a user would have a local Docker image to turn
# into a .sqsh with `sqshbuild dockerd://squall-demo:latest`.
ARG RELEASE=trixie
FROM squall-base:${RELEASE} AS build
RUN set -eu; out=/out; \
    mkdir -p "$out/usr/bin" "$out/etc" "$out/tmp" "$out/fsx" "$out/proc" "$out/sys" "$out/dev" "$out/run"; \
    chmod 1777 "$out/tmp"; ln -s usr/bin "$out/bin"; \
    py=$(readlink -f /usr/bin/python3); \
    for b in "$py" /bin/sh /bin/bash /bin/cat /bin/ls /bin/sleep /usr/bin/env /bin/hostname /usr/bin/id; do \
      cp -L "$b" "$out/usr/bin/"; \
      ldd "$b" | awk '/=>/ && $3 ~ /^\// {print $3} /^\t\/[^ ]*ld-linux/ {print $1}'; \
    done | sort -u | while read -r lib; do mkdir -p "$out$(dirname "$lib")"; cp -L "$lib" "$out$lib"; done; \
    ln -s "$(basename "$py")" "$out/usr/bin/python3"; \
    lib=$(dirname "$("$py" -c 'import os; print(os.__file__)')"); \
    mkdir -p "$out$lib"; \
    tar -C "$lib" --exclude=test --exclude=idlelib --exclude=tkinter --exclude=ensurepip \
        --exclude=__pycache__ -cf - . | tar -C "$out$lib" -xf -; \
    for so in $(ls "$lib"/lib-dynload/*.so); do ldd "$so" | awk '/=>/ && $3 ~ /^\// {print $3}'; done \
      | sort -u | while read -r l; do [ -e "$out$l" ] || { mkdir -p "$out$(dirname "$l")"; cp -L "$l" "$out$l"; }; done; \
    getent passwd root squall nobody > "$out/etc/passwd" || getent passwd root nobody > "$out/etc/passwd"; \
    getent group root nogroup > "$out/etc/group"; \
    printf 'NAME="squall demo"\nID=squall-demo\nPRETTY_NAME="squall demo image (python3)"\n' > "$out/etc/os-release"

FROM scratch
COPY --from=build /out/ /
ENV PATH=/usr/local/bin:/usr/bin:/bin SQUALL_DEMO_IMAGE=1
WORKDIR /fsx/demo
CMD ["python3"]
