"""`devicemanager crosscheck`: each figure the agent publishes held to the manufacturer's own
tool (nvidia-smi, amd-smi, npu-smi, mx-smi, hy-smi, ppu-smi) at the same moment.

The comparison is pure: a tool's answer (text) is parsed into figures per card by a parser per
tool, the agent's reading into the same figures, and the two compared figure by figure into a
report of frozen dataclasses, then rendered. Only `shell.py` runs anything.
"""
