"""The node: which pods run here, and which pod each host process belongs to.

`pods` is the pod index (from the API server's watch or a file), `procfs`, `cgroup` and `pidfds`
read a process, `attribution` places each process a vendor library reports in its pod and
container, and `isolation` is the one boundary per pod every later step runs behind. Pure but
for reading /proc; imports only `devicemanager.model`.
"""
