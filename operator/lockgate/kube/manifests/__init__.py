"""Pure builders: an Endpoint and its Template become Kubernetes objects (plain dicts).

Nothing here talks to a server; `kube.reconcile` applies what these functions return, and
`tests/test_kube_manifests.py` checks that every setting leaves a visible mark. One module
per concern: `names` (owner, object names, labels), `merge` (content hash, replacement),
`rollout`, `keys` (the worker-key Secret), `env`, `scheduling`, `resources`, `security`,
`models` (model caches, network volume), `lb` (load-balancing ports, probe, NetworkPolicy)
and `workloads` (the worker Deployment, the flashboot DaemonSet). Import from the module
itself: this package re-exports nothing. (The registry entry, a Redis record, is
`kube.registry_record`'s.)

Objects per endpoint `<id>`, all owned by the Endpoint so that deleting it cascades:
- Deployment `<id>-workers`: the workers; its replica count belongs to the scaler;
- Secret `<id>-worker-key`: the worker key (its digest is registered in Redis);
- DaemonSet `<id>-flashboot` (flashboot only): pre-pulls the worker image (and the model)
  on every node a worker may land on, so a cold start skips the pull;
- NetworkPolicy `<id>-lb-workers` (load-balancing endpoints, when the gateway's pod labels
  are known): only gateway pods reach the workers' HTTP and health ports.

A load-balancing endpoint's (`type: LB`) workers serve HTTP themselves: their container
gets the HTTP port, `PORT`/`PORT_HEALTH`/`HEALTH_CHECK_PATH` and a readiness probe on the
health path, and each pod carries where it listens (`LB_ANNOTATION`), which `kube.lb_pods`
writes to Redis with the pod's IP for the gateways.
"""
