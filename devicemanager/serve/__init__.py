"""The HTTP world: routes and probes over what the monitor published, and the certificates."""

DEFAULT_PORT = 32443  # the agent's HTTPS port, served and asked for by default
