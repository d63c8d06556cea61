"""The HTTP world: routes and probes over what the monitor published, and the certificates."""
