"""Figures: one entry per grant, measured from its holder's processes, and their rendering.

`slices` builds the per-grant section (each holder's usage on each card or partition),
`figures` each Instance's entries, `snapshot` the JSON and `exposition` the /metrics bytes,
both rendered once a round. Pure; imports `devicemanager.model`, `devicemanager.node` and
`devicemanager.grants`.
"""
