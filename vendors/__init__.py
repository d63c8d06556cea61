"""One module per manufacturer, each a backend behind devicemanager.backend.Backend.

A vendor module imports only devicemanager.model and devicemanager.backend from the core, and
imports its SDK inside open(), never at import time, so `parse` is usable without the SDK.
"""
