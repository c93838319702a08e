"""The `lockgate` command's daily-work commands (`endpoints`, `templates`, `jobs`, `logs`,
`login`, `completion`): clients of the management and job APIs over HTTP (`lockgate.client`),
never of Redis or Kubernetes. `commands.args` declares them; `cli.py` runs them."""
