# syntax=docker/dockerfile:1
# The aisched operator image the Helm chart runs (helm/aisched: image.repository).
#   docker build -t ghcr.io/aisched/aisched:0.1.0 .
# Multi-arch: docker buildx build --platform linux/amd64,linux/arm64 ...

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# Build a wheel of the package alone, so no tests, charts or build tools reach the image.
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip wheel --no-deps --wheel-dir /wheels . \
 && pip wheel --wheel-dir /wheels "$(ls /wheels/aisched-*.whl)"

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="aisched" \
      org.opencontainers.image.description="Kubernetes operator that schedules AI training and inference on GPU clusters" \
      org.opencontainers.image.licenses="Apache-2.0"
# Byte-code is compiled at install time: the root filesystem is read-only at run time.
# glibc's allocator for small objects too: it gives freed pages back (aisched.controller.process_tuning).
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONMALLOC=malloc
# The wheels are copied, not bind-mounted: a builder's layer cache keys a copy by its content but
# does not look into a bind mount, so a cached install step would keep old code.
COPY --from=build /wheels /wheels
RUN pip install --no-index --find-links /wheels --compile aisched \
 && pip uninstall -y pip setuptools wheel \
 && aisched --help >/dev/null
# The chart's restricted securityContext runs as this uid; "nonroot" as in distroless images.
# It needs a passwd entry: kopf names its peering identity after getpass.getuser(),
# which raises KeyError for a uid that has none.
RUN echo "nonroot:x:65532:65532:nonroot:/nonexistent:/usr/sbin/nologin" >>/etc/passwd \
 && echo "nonroot:x:65532:" >>/etc/group
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080 8081
ENTRYPOINT ["aisched"]
CMD ["run"]
