"""The Kubernetes face of lockgate: CRDs, manifest builders, kopf handlers, the operator."""
