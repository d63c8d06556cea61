"""devicemanager: what every pod really uses of the accelerators it was granted."""

__version__ = "0.1.0"
