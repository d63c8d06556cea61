"""`devicemanager summarize` (R-X1): the operator's report of who holds and who uses the
cluster's accelerators, from Prometheus text of HAMi's scheduler (allocation), HAMi's vGPU
monitor (usage) and this agent's own /metrics.

A world of its own. Pure functions over text: `parse` reads lines, `families` names every
family read, `read` turns samples into devices, containers and quotas (`state` holds what it
gathers), `checks` finds what does not add up, `summary` builds the report. `selection` keeps
the series `--node`, `--namespace`, `--pod` ask for. The I/O: `sources` reads files, standard
input and URLs, `prometheus_api` asks Prometheus's HTTP API (R-X9) for the same samples
(and, with `--window`, for each grant's figures over it, which `idle` judges), `cluster` asks
the cluster's sources through the API server (R-X9) for the same text; `render` prints text
or JSON.
"""

from devicemanager.report.parse import parse
from devicemanager.report.render import to_json, to_text
from devicemanager.report.summary import summarize, summarize_texts

__all__ = ["parse", "summarize", "summarize_texts", "to_json", "to_text"]
