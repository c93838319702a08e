"""`lockgate uninstall-cleanup`: what `helm uninstall` must do before the chart's objects go.

The chart keeps its CRDs (and so the users' Endpoints) on uninstall. Without this command,
the Endpoints' worker Deployments (owned by the Endpoints) keep running without a gateway,
and every Endpoint keeps the operator's `lockgate.dev/cleanup` finalizer, so deleting its
namespace or the CRDs later hangs. The chart's pre-delete hook Job runs this command; a
person can run it too (with a kubeconfig) before removing an operator by hand.

Steps, in order: scale the operator to 0 and wait until its pods are gone (else it would
recreate what the next steps delete); delete every Endpoint's worker Deployment and
flashboot DaemonSet (found by the labels of `kube.manifests`, and only those an Endpoint
owns) in the watched namespaces, and with `--builds` the build Jobs; remove the finalizer
from every Endpoint and Template; delete the release's kopf peering objects. The
Endpoints, their worker-key Secrets and the Templates stay: a later install resumes them.
Every wait is bounded by `--timeout`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from lockgate.kube.builds import BUILD_JOB_SELECTOR
from lockgate.kube.cluster import MERGE_PATCH, api_client_from_environment
from lockgate.kube.crds import ENDPOINT, GROUP, TEMPLATE, VERSION
from lockgate.kube.handlers import FINALIZER
from lockgate.kube.manifests.names import (
    COMPONENT_LABEL,
    ENDPOINT_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
)

Obj = dict[str, Any]
# The labels `manifests.labels` puts on every workload the operator builds for an Endpoint.
WORKLOADS = (
    f"{MANAGED_BY_LABEL}={MANAGED_BY},{COMPONENT_LABEL} in (worker,flashboot),{ENDPOINT_LABEL}"
)
PEERINGS = ("kopf.dev", "v1")
POLL_S = 1.0  # s between two looks while waiting for the operator's pods to go


class CleanupError(Exception):
    """A step could not finish (refused by the API server, or out of time)."""


@dataclass(frozen=True)
class Plan:
    """What one run cleans up."""

    release_namespace: str
    operator_deployment: str
    namespaces: tuple[str, ...]  # empty: every namespace (a cluster-wide operator)
    peering_selector: str  # empty: peering is off, there is nothing to delete
    timeout_s: float
    builds: bool = False  # in-cluster builds are on: delete the build Jobs too


# -- decisions (pure) ---------------------------------------------------------------------


def owned_by_endpoint(obj: Obj) -> bool:
    """An object an Endpoint owns: never delete a user's look-alike by its labels alone."""
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return any(
        r.get("kind") == ENDPOINT.kind and r.get("apiVersion", "").startswith(f"{GROUP}/")
        for r in refs
    )


def finalizers_without_ours(obj: Obj) -> list[str] | None:
    """The object's finalizers minus the operator's, or None when it holds none of ours."""
    finalizers = obj.get("metadata", {}).get("finalizers") or []
    if FINALIZER not in finalizers:
        return None
    return [f for f in finalizers if f != FINALIZER]


def namespaces_to_clean(watched: Iterable[str], endpoint_namespace: str = "") -> tuple[str, ...]:
    """The operator's namespaces (and the management API's), once each; () means all."""
    listed = [n for n in watched if n]
    if listed and endpoint_namespace:
        listed.append(endpoint_namespace)
    return tuple(dict.fromkeys(listed))


# -- the API edge ----------------------------------------------------------------------------


class Cleaner:
    """Runs a `Plan` against the API server, printing one line per step and object."""

    def __init__(self, api: k8s.ApiClient, plan: Plan, say: Callable[[str], None]) -> None:
        self.plan = plan
        self.say = say
        self.apps = k8s.AppsV1Api(api)
        self.batch = k8s.BatchV1Api(api)
        self.core = k8s.CoreV1Api(api)
        self.custom = k8s.CustomObjectsApi(api)
        self.deadline = time.monotonic() + plan.timeout_s

    def run(self) -> None:
        self.stop_operator()
        for kind in ("deployment", "daemon_set"):
            self.delete_workloads(kind)
        if self.plan.builds:
            self.delete_build_jobs()
        for plural in (ENDPOINT.plural, TEMPLATE.plural):
            self.release_finalizers(plural)
        self.delete_peerings()

    # -- the operator --------------------------------------------------------------------

    def stop_operator(self) -> None:
        ns, name = self.plan.release_namespace, self.plan.operator_deployment
        try:
            deployment = self.apps.read_namespaced_deployment(name, ns)
        except ApiException as err:
            if err.status != 404:
                raise
            self.say(f"operator Deployment {ns}/{name} not found: nothing to stop")
            return
        self.apps.patch_namespaced_deployment_scale(
            name, ns, {"spec": {"replicas": 0}}, _content_type=MERGE_PATCH
        )
        labels = deployment.spec.selector.match_labels or {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        self.say(f"operator Deployment {ns}/{name} scaled to 0; waiting for its pods to go")
        while pods := self.core.list_namespaced_pod(ns, label_selector=selector).items:
            if time.monotonic() > self.deadline:
                left = ", ".join(p.metadata.name for p in pods)
                raise CleanupError(f"operator pods still there after the timeout: {left}")
            time.sleep(POLL_S)
        self.say("operator stopped")

    # -- workloads -------------------------------------------------------------------------

    def _each_namespace(self, list_all: Callable, list_in: Callable, **kw: Any) -> list[Any]:
        if not self.plan.namespaces:
            return list(list_all(**kw).items)
        return [item for ns in self.plan.namespaces for item in list_in(ns, **kw).items]

    def delete_workloads(self, kind: str) -> None:
        """Delete the Endpoints' Deployments or DaemonSets; their pods go with them."""
        items = self._each_namespace(
            getattr(self.apps, f"list_{kind}_for_all_namespaces"),
            getattr(self.apps, f"list_namespaced_{kind}"),
            label_selector=WORKLOADS,
        )
        delete = getattr(self.apps, f"delete_namespaced_{kind}")
        label = "Deployment" if kind == "deployment" else "DaemonSet"
        count = 0
        for item in items:
            obj = self.apps.api_client.sanitize_for_serialization(item)
            if not owned_by_endpoint(obj):
                continue
            meta = item.metadata
            try:
                delete(meta.name, meta.namespace, propagation_policy="Background")
            except ApiException as err:
                if err.status != 404:
                    raise
            self.say(f"deleted {label} {meta.namespace}/{meta.name}")
            count += 1
        self.say(f"{count} worker {label}(s) deleted")

    def delete_build_jobs(self) -> None:
        """Delete the build Jobs (a running build stops; its pod goes with it)."""
        items = self._each_namespace(
            self.batch.list_job_for_all_namespaces, self.batch.list_namespaced_job,
            label_selector=BUILD_JOB_SELECTOR,
        )  # fmt: skip
        for item in items:
            meta = item.metadata
            try:
                self.batch.delete_namespaced_job(
                    meta.name, meta.namespace, propagation_policy="Background"
                )
            except ApiException as err:
                if err.status != 404:
                    raise
            self.say(f"deleted build Job {meta.namespace}/{meta.name}")
        self.say(f"{len(items)} build Job(s) deleted")

    # -- finalizers ------------------------------------------------------------------------

    def _list_custom(self, group: str, version: str, plural: str) -> list[Obj]:
        if not self.plan.namespaces:
            return self.custom.list_cluster_custom_object(group, version, plural)["items"]
        return [
            item
            for ns in self.plan.namespaces
            for item in self.custom.list_namespaced_custom_object(group, version, ns, plural)[
                "items"
            ]
        ]

    def release_finalizers(self, plural: str) -> None:
        """Remove the operator's finalizer; a merge patch with the read resourceVersion, so a
        concurrent change of the list is retried instead of overwritten."""
        count = 0
        for obj in self._list_custom(GROUP, VERSION, plural):
            if self._release_one(plural, obj):
                count += 1
        self.say(f"{FINALIZER} removed from {count} {plural}")

    def _release_one(self, plural: str, obj: Obj) -> bool:
        meta = obj["metadata"]
        for _ in range(5):
            remaining = finalizers_without_ours(obj)
            if remaining is None:
                return False
            patch = {
                "metadata": {"finalizers": remaining, "resourceVersion": meta["resourceVersion"]}
            }
            try:
                self.custom.patch_namespaced_custom_object(
                    GROUP, VERSION, meta["namespace"], plural, meta["name"], patch,
                    _content_type=MERGE_PATCH,
                )  # fmt: skip
            except ApiException as err:
                if err.status == 404:
                    return False
                if err.status != 409:
                    raise
                obj = self.custom.get_namespaced_custom_object(
                    GROUP, VERSION, meta["namespace"], plural, meta["name"]
                )
                meta = obj["metadata"]
                continue
            self.say(f"finalizer removed from {plural} {meta['namespace']}/{meta['name']}")
            return True
        raise CleanupError(f"{plural} {meta['namespace']}/{meta['name']} kept changing")

    # -- kopf peering ----------------------------------------------------------------------

    def delete_peerings(self) -> None:
        """The release's KopfPeering/ClusterKopfPeering objects (post-install hooks, which
        `helm uninstall` does not delete). Absent kinds (peering off) are skipped."""
        selector = self.plan.peering_selector
        if not selector:
            self.say("kopf peering off: no peering object to delete")
            return
        try:
            cluster = self.custom.list_cluster_custom_object(
                *PEERINGS, "clusterkopfpeerings", label_selector=selector
            )["items"]
            namespaced = self.custom.list_cluster_custom_object(
                *PEERINGS, "kopfpeerings", label_selector=selector
            )["items"]
        except ApiException as err:
            if err.status not in (403, 404):  # 403: cluster-wide list not granted
                raise
            cluster, namespaced = [], self._namespaced_peerings(selector)
        for item in cluster:
            self._delete_custom(None, "clusterkopfpeerings", item["metadata"]["name"])
        for item in namespaced:
            meta = item["metadata"]
            self._delete_custom(meta["namespace"], "kopfpeerings", meta["name"])
        self.say(f"{len(cluster) + len(namespaced)} kopf peering object(s) deleted")

    def _namespaced_peerings(self, selector: str) -> list[Obj]:
        items: list[Obj] = []
        for ns in self.plan.namespaces:
            try:
                items += self.custom.list_namespaced_custom_object(
                    *PEERINGS, ns, "kopfpeerings", label_selector=selector
                )["items"]
            except ApiException as err:
                if err.status != 404:
                    raise
        return items

    def _delete_custom(self, namespace: str | None, plural: str, name: str) -> None:
        try:
            if namespace is None:
                self.custom.delete_cluster_custom_object(*PEERINGS, plural, name)
            else:
                self.custom.delete_namespaced_custom_object(*PEERINGS, namespace, plural, name)
        except ApiException as err:
            if err.status != 404:
                raise
        where = f"{namespace}/{name}" if namespace else name
        self.say(f"deleted {plural} {where}")


# -- the command -----------------------------------------------------------------------------


def plan_from_args(args: argparse.Namespace) -> Plan:
    return Plan(
        release_namespace=args.release_namespace,
        operator_deployment=args.operator_deployment,
        namespaces=namespaces_to_clean(args.namespace or [], args.endpoint_namespace or ""),
        peering_selector=args.peering_selector,
        timeout_s=args.timeout,
        builds=bool(getattr(args, "builds", False)),
    )


def main(args: argparse.Namespace) -> int:
    plan = plan_from_args(args)

    def say(line: str) -> None:
        print(f"uninstall-cleanup: {line}", flush=True)

    scope = ", ".join(plan.namespaces) if plan.namespaces else "every namespace"
    say(f"cleaning up lockgate in {scope} (timeout {plan.timeout_s:g} s)")
    try:
        Cleaner(api_client_from_environment(), plan, say).run()
    except CleanupError as err:
        say(f"FAILED: {err}")
        return 1
    except ApiException as err:
        say(f"FAILED: the API server answered {err.status} {err.reason}: {err.body}")
        return 1
    say("done: no lockgate worker is left running and no Endpoint holds the operator's finalizer")
    return 0
