"""The shell that runs the core: the monitor's rounds, the wiring of a live or replayed agent,
its settings and its logs. The only part of the package that imports every world (`kube`,
`serve`, the vendors through `devicemanager.backend`) and the core's steps together.
"""
