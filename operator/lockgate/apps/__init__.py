"""Composition roots: one module per process, wiring the parts together.

`apps.gateway` (`lockgate gateway`), `apps.manage` (`lockgate manage`), `apps.operator`
(`lockgate operator`) and `apps.dev` (`lockgate dev`) each read their settings, build the
parts that process runs (a `ControlPlane` for the management API, a `WorkerPool` for the
scaler…), hand them to each other and serve until a signal. They may import any part; no
part imports them, only `cli` (by name, when a command runs) and each other
(tests/test_layers.py holds the table).
"""
