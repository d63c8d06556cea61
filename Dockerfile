# The agent's image. Multi-stage: wheels are built in the first stage, the final stage only
# installs them, so no compiler or build tool ends up in the image.
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY devicemanager devicemanager
COPY vendors vendors
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim-bookworm
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index /wheels/*.whl && rm -rf /wheels
# NVML is not in the image: the NVIDIA container toolkit mounts the host's libnvidia-ml.so.1.
EXPOSE 32443
ENTRYPOINT ["devicemanager", "serve"]
