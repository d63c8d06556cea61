"""The kubelet's pod-resources messages: podresources_v1.proto and its generated module."""
