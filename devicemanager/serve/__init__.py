"""The HTTP world: routes and probes over what the monitor published, and the certificates."""

DEFAULT_PORT = 32443  # the agent's HTTPS port, served and asked for by default
AGENT = f"https://127.0.0.1:{DEFAULT_PORT}"  # the agent as `snapshot` and `metrics` ask it
SNAPSHOT_URL = f"{AGENT}/monitor/snapshot"
METRICS_URL = f"{AGENT}/metrics"

# A serving pair's file names, in --cert-dir as in a Secret of type kubernetes.io/tls. Here, not
# in tls.py, so that the child minting a self-signed pair (mint.py) imports nothing else of ours.
CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
