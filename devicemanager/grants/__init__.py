"""Grants: what each pod was given of which card or partition.

`allocations` reads GPUStack's and HAMi's annotations, `deviceplugins` the kubelet's
device-plugin ids, `quantity` Kubernetes quantities; `grants` joins them into one grant per card
or partition, by canonical id. Pure; imports `devicemanager.model` and `devicemanager.node`.
"""
