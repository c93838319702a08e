"""A load-balancing endpoint's (`type: LB`) workers serve HTTP themselves: their ports,
variables and readiness probe, the pod annotation saying where they listen (`kube.lb_pods`
reads it back), and the NetworkPolicy that admits only gateway pods; also a Template's
container ports (`8000/http`)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from lockgate.kube.manifests.names import Obj, Owner, metadata, network_policy_name, selector
from lockgate.kube.settings import OperatorSettings
from lockgate.models import TemplateSpec

# Load-balancing workers (RunPod's contract): the HTTP port when the Template names none,
# the health path, and where a pod says it listens: JSON {port, healthPort, path}.
LB_DEFAULT_PORT = 80
LB_HEALTH_PATH = "/ping"
LB_ANNOTATION = "lockgate.dev/lb-worker"
LB_PROBE_PERIOD_S = 2  # the kubelet's readiness probe; routing follows the gateway's polls


def container_ports(ports: list[str]) -> list[Obj]:
    """`8000/http` → a TCP port named `http-8000`; `22/tcp` → `tcp-22`."""
    out = []
    for port in ports:
        number, kind = port.split("/")
        out.append({"name": f"{kind}-{number}", "containerPort": int(number), "protocol": "TCP"})
    return out


@dataclass(frozen=True, slots=True)
class LbPorts:
    """Where a load-balancing worker serves: `PORT`, `PORT_HEALTH`, `HEALTH_CHECK_PATH`."""

    port: int
    health_port: int
    path: str

    def annotation(self) -> str:
        """The pod annotation `kube.lb_pods` reads back (JSON, keys sorted)."""
        body = {"port": self.port, "healthPort": self.health_port, "path": self.path}
        return json.dumps(body, sort_keys=True, separators=(",", ":"))


def _port_value(value: str | None) -> int | None:
    """A port number from a Template variable; None when it is no valid port."""
    if value is None or not value.strip().isdigit():
        return None
    number = int(value)
    return number if 0 < number < 65536 else None


def lb_ports(template: TemplateSpec) -> LbPorts:
    """The HTTP port (the Template's first `N/http` port, else its `PORT` variable, else
    80), the health port (`PORT_HEALTH`, else the same) and the health path
    (`HEALTH_CHECK_PATH`, else `/ping`): a Template's env overrides each, as on RunPod."""
    http = [int(p.split("/")[0]) for p in template.ports if p.endswith("/http")]
    port = _port_value(template.env.get("PORT")) or (http[0] if http else LB_DEFAULT_PORT)
    health = _port_value(template.env.get("PORT_HEALTH")) or port
    path = template.env.get("HEALTH_CHECK_PATH") or LB_HEALTH_PATH
    return LbPorts(port, health, path if path.startswith("/") else f"/{path}")


def lb_env(template: TemplateSpec) -> dict[str, str]:
    """`PORT`, `PORT_HEALTH`, `HEALTH_CHECK_PATH` of a load-balancing worker."""
    lb = lb_ports(template)
    return {"PORT": str(lb.port), "PORT_HEALTH": str(lb.health_port), "HEALTH_CHECK_PATH": lb.path}


def lb_container_ports(template: TemplateSpec) -> list[Obj]:
    """The Template's ports, plus the HTTP and health ports when it does not list them."""
    ports = container_ports(template.ports)
    listed = {p["containerPort"] for p in ports}
    lb = lb_ports(template)
    for number in dict.fromkeys((lb.port, lb.health_port)):
        if number not in listed:
            ports.append({"name": f"http-{number}", "containerPort": number, "protocol": "TCP"})
    return ports


def lb_readiness_probe(template: TemplateSpec) -> Obj:
    """The kubelet's readiness probe on the health path. It counts 204 (initializing) as
    ready as well as 200, so routing never follows it: the gateways poll the same path and
    route only on 200; the probe makes `kubectl get pods` and rollouts honest."""
    lb = lb_ports(template)
    return {
        "httpGet": {"path": lb.path, "port": lb.health_port, "scheme": "HTTP"},
        "periodSeconds": LB_PROBE_PERIOD_S,
        "timeoutSeconds": 2,
        "failureThreshold": 3,
    }


def lb_network_policy(owner: Owner, template: TemplateSpec, settings: OperatorSettings) -> Obj:
    """A load-balancing endpoint's worker pods admit the gateway's pods (`lb_gateway_labels`,
    in any namespace) to their HTTP and health ports, and no one else: the gateway proxies
    to them and polls their health; the kubelet's probes come from the node, which a
    NetworkPolicy always admits. Ingress only."""
    lb = lb_ports(template)
    ports = [{"port": p, "protocol": "TCP"} for p in dict.fromkeys((lb.port, lb.health_port))]
    gateways = {"namespaceSelector": {}, "podSelector": {"matchLabels": settings.lb_gateway_labels}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(owner, network_policy_name(owner.name), "worker"),
        "spec": {
            "podSelector": {"matchLabels": selector(owner.name, "worker")},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [gateways], "ports": ports}],
        },
    }
