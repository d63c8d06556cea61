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
# libnvidia-ml.so.1 (NVIDIA_DRIVER_CAPABILITIES=utility).
# Not root by default: uid and gid 65534, numeric so that a kubelet's runAsNonRoot check can
# verify it without a passwd lookup, and the very user the base DaemonSet runs as (with every
# capability dropped; deploy/base/daemonset.yaml and tests/test_nonroot.py say why that is
# enough). The agent writes nothing but its self-signed key, in /tmp. The overlays of the
# vendors whose device nodes only a privileged root container can open (every one but NVIDIA)
# set runAsUser: 0 themselves (deploy/components/device-access says why), so they never depend
# on this default.
USER 65534:65534
EXPOSE 32443
ENTRYPOINT ["devicemanager", "serve"]
