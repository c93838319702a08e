# syntax=docker/dockerfile:1
# A base image for lockgate workers: Python and the lockgate worker runtime (which needs
# only httptools) in /opt/lockgate, on a CUDA base by default.
#   docker build -f images/worker.Dockerfile -t <registry>/lockgate/worker:0.1.0 .
#   docker build -f images/worker.Dockerfile --build-arg BASE_IMAGE=python:3.12-slim \
#     -t <registry>/lockgate/worker:0.1.0-cpu .                       # CPU workers
# Your worker image starts FROM it, copies its handler and sets the command (see
# examples/*/Dockerfile). The runtime reads the RUNPOD_* / LOCKGATE_* variables the
# operator sets; any base with Python 3.11+ (or none: it is installed) will do.
# Without access to PyPI: --build-arg PIP_NO_INDEX=1 --build-arg PIP_FIND_LINKS=<wheelhouse>,
# as for images/control-plane.Dockerfile; unset (the default) they change nothing.
ARG BASE_IMAGE=nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04
ARG BUILD_IMAGE=python:3.11-slim-bookworm

FROM ${BUILD_IMAGE} AS build
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
# The base install is the worker runtime only (httptools); no server extras.
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM ${BASE_IMAGE}
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# CUDA images carry no Python: add the distribution's (Ubuntu 24.04: 3.12).
RUN if ! command -v python3 >/dev/null || ! python3 -c 'import venv, ensurepip' 2>/dev/null; then \
      apt-get update \
      && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && python3 -c 'import sys; assert sys.version_info >= (3, 11), "lockgate needs Python 3.11+"' \
 && python3 -m venv /opt/lockgate
COPY --from=build /wheels /wheels
RUN /opt/lockgate/bin/pip install /wheels/*.whl && rm -rf /wheels \
 && echo 'lockgate:x:10001:10001:lockgate:/app:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'lockgate:x:10001:' >> /etc/group
ENV PATH=/opt/lockgate/bin:$PATH \
    PYTHONUNBUFFERED=1
WORKDIR /app
# Non-root by default; a derived image that installs packages switches to root and back.
USER 10001:10001
CMD ["python", "-c", "print('lockgate worker base: COPY your handler.py and set CMD [\"python\", \"-u\", \"handler.py\"]')"]
