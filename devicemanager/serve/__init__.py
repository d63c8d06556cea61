"""The HTTP world: routes and probes over what the monitor published, and the certificates."""

DEFAULT_PORT = 32443  # the agent's HTTPS port, served and asked for by default
AGENT = f"https://127.0.0.1:{DEFAULT_PORT}"  # the agent as `snapshot` and `metrics` ask it
SNAPSHOT_URL = f"{AGENT}/monitor/snapshot"
METRICS_URL = f"{AGENT}/metrics"
