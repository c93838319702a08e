"""Dev mode's parts: embedded Redis, local worker processes, the local control plane
(the one-process runner that wires them is `apps.dev`)."""
