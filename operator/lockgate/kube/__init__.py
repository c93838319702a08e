"""The Kubernetes face of lockgate: CRDs, manifest builders, kopf handlers, the scaler
loop, and the Kubernetes backends of the management API and of the scaler (the operator
process that wires them is `apps.operator`)."""
