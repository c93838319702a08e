"""Management API (`/v1/endpoints`) over the `ControlPlane` protocol that its backends
(`kube.controlplane`, `dev.controlplane`) satisfy; `apps.manage` serves it on its own."""
