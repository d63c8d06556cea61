# The agent's image: one per release, run by one DaemonSet per manufacturer (daemonset.yaml).
#
# Two stages: the first builds wheels for exactly the versions in requirements.lock plus our own;
# the second installs only those wheels (--no-index: nothing unpinned can slip in) and carries no
# compiler, no pip cache and no source tree. Pin the base by digest in the release pipeline.
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY requirements.lock pyproject.toml README.md ./
COPY devicemanager ./devicemanager
COPY vendors ./vendors
RUN pip wheel --no-cache-dir --wheel-dir /wheels --requirement requirements.lock \
 && pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
 && cp requirements.lock /wheels/

FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="devicemanager" \
      org.opencontainers.image.description="Per-node agent: what every pod uses of the accelerators it was granted" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels \
        --requirement /wheels/requirements.lock /wheels/devicemanager-*.whl \
 && rm -rf /wheels
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Vendor libraries are not in the image: the NVIDIA container toolkit mounts the host's
# libnvidia-ml.so.1 (NVIDIA_DRIVER_CAPABILITIES=utility). The image sets no USER, so on its own
# it runs as the base image's root; the DaemonSet's securityContext sets the user: uid and gid
# 65534 with every capability dropped (deploy/base/daemonset.yaml says why that is enough), or
# root and privileged for the vendors whose device nodes only such a container can open
# (deploy/components/device-access says why).
EXPOSE 32443
ENTRYPOINT ["devicemanager", "serve"]
