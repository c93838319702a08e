# syntax=docker/dockerfile:1
# The in-cluster builder of endpoints with a git `source` (issue 48, docs/builds.md): one
# Kubernetes Job per build runs `git` (an init container: the clone) and `buildah bud`
# (the build and push) from this image. buildah runs with chroot isolation and vfs storage,
# as root with eight capabilities and no privilege escalation (docs/security.md, "In-cluster
# builds"). Debian's packages: nothing pulled from elsewhere.
#   docker build -f images/builder.Dockerfile -t <registry>/lockgate/builder:0.1.0 .
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends buildah git ca-certificates \
 && rm -rf /var/lib/apt/lists/*
# chroot isolation (no runc inside the pod), vfs storage (no overlay mount), the storage
# in the pod's emptyDir (/var/lib/containers is where the Job mounts it).
ENV BUILDAH_ISOLATION=chroot STORAGE_DRIVER=vfs
WORKDIR /workspace
CMD ["buildah", "--version"]
