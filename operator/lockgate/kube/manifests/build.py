"""The build Job of an endpoint's git `source` (issue 48, docs/builds.md): one Job per
build, in the builds namespace (`OperatorSettings.builds_namespace`).

- an init container `clone` (restricted: non-root, no capability) clones the repository
  and checks out the ref, with the `credentialsSecret` as git's credential when named
  (basic-auth: `username`/`password`; ssh-auth: `ssh-privatekey`); it writes the commit
  (hash, date, the branch when a branch was built, subject) to its termination message;
- the init container `build` runs `buildah bud` (chroot isolation, vfs storage, as root
  with eight capabilities, seccomp and AppArmor unconfined: docs/security.md) with the
  registry's per-endpoint cache (`--layers --cache-from/--cache-to <registry>/<endpoint>-cache`);
  when it fails, its last log lines are its termination message (`FallbackToLogsOnError`);
- the container `push` (the same profile, the same image storage) runs `buildah push
  --digestfile /dev/termination-log`: the pushed digest is its termination message. The
  push is a container of its own so that the pod's status tells it apart from the build:
  the build's UPLOADING (`kube.buildjobs.progress`).

Not a row of `kube.reconcile.OWNED_OBJECTS`: a row is one object per endpoint applied
while a setting wants it, whereas builds are many per endpoint, made once each on demand
(`kube.builds`) and never updated. A Job in the builds namespace cannot have the
Endpoint as owner (owner references stay within a namespace): it carries the endpoint's
labels instead, and `ttlSecondsAfterFinished` removes it.
"""

from __future__ import annotations

from lockgate.kube.manifests.names import Obj, Owner, labels
from lockgate.kube.manifests.security import HELPER_UID, LOCKED, SECCOMP
from lockgate.kube.settings import OperatorSettings
from lockgate.models.build import BUILD_ID_PREFIX, Build
from lockgate.models.source import GitSource

BUILD_COMPONENT = "build"
BUILD_LABEL = "lockgate.dev/build"  # the build id (build_…) on the Job and its pod
CLONE_CONTAINER = "clone"
BUILD_CONTAINER = "build"
PUSH_CONTAINER = "push"
WORKSPACE = "/workspace"
SOURCE_DIR = f"{WORKSPACE}/src"
GIT_CREDENTIALS = "/run/lockgate/git"
PUSH_AUTH = "/run/lockgate/push"
STORAGE = "/var/lib/containers"
APPARMOR = "container.apparmor.security.beta.kubernetes.io/"  # + the container's name
# What buildah needs besides root (docs/security.md): all within Pod Security's baseline.
BUILD_CAPABILITIES = (
    "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETFCAP", "SETGID", "SETUID", "SYS_CHROOT",
)  # fmt: skip

# The clone's termination message: the commit (hash, date, branch, subject cut to 300
# characters), then, when the repository has one (`.runpod/tests.json` over `tests.json`),
# TESTS_MARKER and the file gzip+base64 on one line, at most TESTS_MAX characters: the
# kubelet keeps 4096 bytes of a container's message, the commit takes at most ~620.
TESTS_MARKER = "tests.json gzip+base64:"
TESTS_MAX = 3400

CLONE_SCRIPT = r"""set -eu
if [ -f "$CREDS/ssh-privatekey" ]; then
  export GIT_SSH_COMMAND="ssh -i $CREDS/ssh-privatekey -o StrictHostKeyChecking=accept-new"
fi
if [ -f "$CREDS/username" ]; then
  printf '#!/bin/sh\ncase "$1" in Username*) cat "%s/username";; *) cat "%s/password";; esac\n' \
    "$CREDS" "$CREDS" > "$HOME/askpass"
  chmod 700 "$HOME/askpass"
  export GIT_ASKPASS="$HOME/askpass"
fi
git clone --quiet --no-checkout -- "$GIT_URL" "$SRC"
cd "$SRC"
ref="${GIT_REF:-HEAD}"
commit=$(git rev-parse --verify --quiet "origin/$ref^{commit}" ||
  git rev-parse --verify --quiet "$ref^{commit}") || {
  echo "ref '$ref' is not a branch, tag or commit of $GIT_URL" >&2
  exit 1
}
git checkout --quiet --detach "$commit"
branch=$(git rev-parse --verify --quiet "origin/$ref^{commit}" >/dev/null && echo "$ref" || true)
if [ "$ref" = HEAD ]; then
  branch=$(git symbolic-ref --quiet --short refs/remotes/origin/HEAD || true)
  branch=${branch#origin/}
fi
out="${TERMINATION_LOG:-/dev/termination-log}"
{ git log -1 --format='%H%n%cI'; echo "$branch"; git log -1 --format=%s | cut -c1-300; } > "$out"
echo "HEAD is now at $(git log -1 --format='%h %s')"
for tests in .runpod/tests.json tests.json; do
  [ -f "$tests" ] || continue
  packed=$(gzip -9nc "$tests" | base64 | tr -d '\n')
  if [ "${#packed}" -gt "$TESTS_MAX" ]; then
    echo "$tests is too large to reach the operator: ${#packed} bytes gzip+base64, at most" \
      "$TESTS_MAX (a pod's termination message holds 4096 bytes)" | tee -a "$out" >&2
    exit 1  # the message's last line is why (`kube.buildjobs.failure`)
  fi
  printf '%s\n%s\n' "$TESTS_MARKER" "$packed" >> "$out"
  echo "$tests: handed to the operator (${#packed} bytes gzip+base64)"
  break
done
"""

STOP_GRACE_S = 5  # seconds a stopped build pod gets before it is killed

BUILD_SCRIPT = r"""set -eu
cd "$SRC"
set -- --storage-driver vfs
buildah "$@" bud --isolation chroot --layers --pull=missing --tls-verify="$TLS_VERIFY" \
  --cache-from "$CACHE_REPO" --cache-to "$CACHE_REPO" ${AUTHFILE:+--authfile "$AUTHFILE"} \
  -f "$DOCKERFILE" -t "$IMAGE" "$CONTEXT"
"""

PUSH_SCRIPT = r"""set -eu
set -- --storage-driver vfs
echo "pushing $IMAGE"
buildah "$@" push --tls-verify="$TLS_VERIFY" ${AUTHFILE:+--authfile "$AUTHFILE"} \
  --digestfile /dev/termination-log "$IMAGE"
echo "pushed $IMAGE@$(cat /dev/termination-log)"
"""


def build_job_name(build_id: str) -> str:
    """`build-<random part>`: build ids are unique across endpoints; `_` is no DNS name."""
    return "build-" + build_id.removeprefix(BUILD_ID_PREFIX)


def builds_namespace(settings: OperatorSettings, endpoint_namespace: str) -> str:
    """Where an endpoint's build Jobs run: `builds.namespace`, else the endpoint's own."""
    return settings.builds_namespace or endpoint_namespace


def image_repository(settings: OperatorSettings, endpoint_id: str) -> str:
    """Where an endpoint's builds are pushed: `<builds.registry>/<endpoint id>`."""
    return f"{settings.builds_registry.rstrip('/')}/{endpoint_id}"


def image_name(settings: OperatorSettings, endpoint_id: str, build_id: str) -> str:
    """The tag a build pushes (its digest is what workers run)."""
    return f"{image_repository(settings, endpoint_id)}:{build_id.removeprefix(BUILD_ID_PREFIX)}"


def cache_repository(settings: OperatorSettings, endpoint_id: str) -> str:
    """The endpoint's layer cache in the registry (buildah's `--cache-to/--cache-from`)."""
    return f"{image_repository(settings, endpoint_id)}-cache"


def _env(values: dict[str, str]) -> list[Obj]:
    return [{"name": k, "value": v} for k, v in values.items()]


# The Endpoint's namespace on its build Jobs (which may run in another): a completed
# build touches the Endpoint there, so its reconcile takes the build (kube/builds.py).
ENDPOINT_NAMESPACE_ANNOTATION = "lockgate.dev/endpoint-namespace"


# What the push container needs of the build's environment (it mounts the same volumes).
PUSH_ENV = ("IMAGE", "TLS_VERIFY", "BUILDAH_ISOLATION", "STORAGE_DRIVER", "HOME", "AUTHFILE")


def _buildah(
    settings: OperatorSettings, name: str, script: str, env: dict[str, str], mounts: list[Obj]
) -> Obj:
    """A container running buildah (the build, the push): root with BUILD_CAPABILITIES,
    seccomp and AppArmor unconfined (docs/security.md), `builds.resources`."""
    container: Obj = {
        "name": name,
        "image": settings.builder_image,
        "command": ["sh", "-c", script],
        "env": _env(env),
        "volumeMounts": mounts,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {
            "runAsUser": 0,
            "runAsNonRoot": False,
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"], "add": list(BUILD_CAPABILITIES)},
            "seccompProfile": {"type": "Unconfined"},
            "appArmorProfile": {"type": "Unconfined"},
        },
    }
    if settings.builds_resources:
        container["resources"] = settings.builds_resources
    return container


def build_job(owner: Owner, build: Build, source: GitSource, settings: OperatorSettings) -> Obj:
    """The Job that builds `build` of the endpoint `owner` from `source` and pushes it."""
    ref = build.ref or source.ref
    meta_labels = {**labels(owner.name, BUILD_COMPONENT), BUILD_LABEL: build.id}
    namespace = builds_namespace(settings, owner.namespace)
    metadata: Obj = {
        "name": build_job_name(build.id),
        "namespace": namespace,
        "labels": meta_labels,
        "annotations": {ENDPOINT_NAMESPACE_ANNOTATION: owner.namespace},
    }
    if namespace == owner.namespace:
        metadata["ownerReferences"] = [{**owner.reference(), "controller": False}]
    volumes: list[Obj] = [
        {"name": "workspace", "emptyDir": {}},
        {"name": "storage", "emptyDir": {}},
    ]
    clone_mounts = [{"name": "workspace", "mountPath": WORKSPACE}]
    build_mounts = [*clone_mounts, {"name": "storage", "mountPath": STORAGE}]
    build_env = {
        "SRC": SOURCE_DIR,
        "IMAGE": image_name(settings, owner.name, build.id),
        "CACHE_REPO": cache_repository(settings, owner.name),
        "DOCKERFILE": source.dockerfilePath,
        "CONTEXT": source.contextPath,
        "TLS_VERIFY": "false" if settings.builds_insecure_registry else "true",
        "BUILDAH_ISOLATION": "chroot",
        "STORAGE_DRIVER": "vfs",
        "HOME": WORKSPACE,
    }
    if source.credentialsSecret:
        volumes.append(
            {
                "name": "git-credentials",
                "secret": {"secretName": source.credentialsSecret, "defaultMode": 0o400},
            }
        )
        clone_mounts = [
            *clone_mounts,
            {"name": "git-credentials", "mountPath": GIT_CREDENTIALS, "readOnly": True},
        ]
    if settings.builds_push_secret:
        volumes.append(
            {
                "name": "push-auth",
                "secret": {
                    "secretName": settings.builds_push_secret,
                    "items": [{"key": ".dockerconfigjson", "path": "auth.json"}],
                },
            }
        )
        build_mounts.append({"name": "push-auth", "mountPath": PUSH_AUTH, "readOnly": True})
        build_env["AUTHFILE"] = f"{PUSH_AUTH}/auth.json"
    clone = {
        "name": CLONE_CONTAINER,
        "image": settings.builder_image,
        "command": ["sh", "-c", CLONE_SCRIPT],
        "env": _env(
            {
                "GIT_URL": source.url,
                "GIT_REF": ref,
                "SRC": SOURCE_DIR,
                "CREDS": GIT_CREDENTIALS,
                "HOME": WORKSPACE,
                "GIT_TERMINAL_PROMPT": "0",
                "TESTS_MARKER": TESTS_MARKER,
                "TESTS_MAX": str(TESTS_MAX),
            }
        ),
        "volumeMounts": clone_mounts,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": HELPER_UID,
            "runAsGroup": HELPER_UID,
            **LOCKED,
            **SECCOMP,
        },
    }
    builder = _buildah(settings, BUILD_CONTAINER, BUILD_SCRIPT, build_env, build_mounts)
    push_env = {k: build_env[k] for k in PUSH_ENV if k in build_env}
    pusher = _buildah(settings, PUSH_CONTAINER, PUSH_SCRIPT, push_env, build_mounts)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": source.buildTimeoutMin * 60,
            "ttlSecondsAfterFinished": settings.builds_ttl_s,
            "template": {
                # the field (appArmorProfile) from Kubernetes 1.30, the annotation before
                "metadata": {
                    "labels": meta_labels,
                    "annotations": {APPARMOR + c["name"]: "unconfined" for c in (builder, pusher)},
                },
                "spec": {
                    "restartPolicy": "Never",
                    # nothing to save when a build is stopped (cancel, uninstall); the
                    # build script's shell, PID 1, ignores SIGTERM: killed after this
                    "terminationGracePeriodSeconds": STOP_GRACE_S,
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "initContainers": [clone, builder],
                    "containers": [pusher],
                    "volumes": volumes,
                },
            },
        },
    }
