"""The kubelet's pod-resources messages for the tests' stand-in kubelet
(tests/podresources_server.py): podresources_v1.proto and the module scripts/protos generates
from it. The agent reads the same messages with its own decoder
(devicemanager/kube/podresources_messages.py), checked against this one."""
