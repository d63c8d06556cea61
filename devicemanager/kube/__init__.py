"""The cluster's world: the API server client, the node's pod watch, the kubelet's figures, the
exporter role and the per-Instance sampler. The pure core never imports from here."""
