"""What each dependency adds to the agent's resident set, anonymous and file-backed (issue 32).

A fresh interpreter imports, group by group in the order the agent loads them, what a node in
a cluster loads, and reads its own `/proc/self/status` (RssAnon, RssFile) after each group;
each group's figure is what it added to the groups before it. The last groups, never loaded by
the agent, are measured on top of the rest for comparison: grpcio, the gRPC library the
kubelet's pod-resources client used before grpclib, and lightkube with its HTTP client, which
read the cluster's configuration and carried its requests before issue 46, and grpclib with h2
and protobuf, which read the kubelet's pod-resources before issue 46 too. Three fresh
interpreters, median.

    python bench/imports.py [--tries 3]

Prints a Markdown table (docs/performance.md, "Memory: where the floor is") and one JSON line
last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import REPO, report

GROUPS: list[tuple[str, str]] = [
    ("the interpreter", ""),
    ("asyncio, ssl, json, gzip, logging", "import asyncio, ssl, json, gzip, logging"),
    (
        "uvicorn, uvloop, httptools, starlette, anyio",
        "import uvicorn, uvloop, httptools, uvicorn.protocols.http.httptools_impl, "
        "uvicorn.lifespan.off, starlette.applications, anyio",
    ),
    ("prometheus_client, psutil", "import prometheus_client, psutil"),
    (
        "the agent's own modules",
        "import devicemanager.cli, devicemanager.agent.wiring, devicemanager.serve.http",
    ),
    (
        "the API server's and the kubelet's clients (http.client), the watch, DRA",
        "import devicemanager.kube.client, devicemanager.kube.informer, "
        "devicemanager.kube.dra, devicemanager.kube.cluster, devicemanager.kube.kubelet",
    ),
    (
        "the kubelet's pod-resources client: HTTP/2, HPACK and the messages, our own",
        "import devicemanager.kube.podresources",
    ),
    (
        "grpclib, h2, multidict, protobuf and its generated messages (not loaded since issue 46; "
        "for comparison)",
        "import grpclib.client, tests.proto.podresources_v1_pb2",
    ),
    ("grpcio (not loaded; for comparison)", "import grpc"),
    (
        "lightkube and httpx2, msgspec, yaml (not loaded since issue 46; for comparison)",
        "import lightkube.config.client_adapter",
    ),
]

COMPARED = 3  # the last groups: never loaded by the agent

CHILD = """
import json, sys
def rss():
    fields = dict(line.split(':', 1) for line in open('/proc/self/status'))
    return [int(fields[k].split()[0]) for k in ('RssAnon', 'RssFile')]
out = [rss()]
for statement in json.loads(sys.argv[1]):
    exec(statement)
    out.append(rss())
print(json.dumps(out))
"""


def one() -> list[list[int]]:
    statements = [code for _, code in GROUPS[1:]]
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(statements)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    figures: list[list[int]] = json.loads(done.stdout)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tries", type=int, default=3)
    args = parser.parse_args()
    tries = [one() for _ in range(args.tries)]
    rows = []
    for i, (name, _) in enumerate(GROUPS):
        added = [[(t[i][k] - (t[i - 1][k] if i else 0)) / 1024 for k in (0, 1)] for t in tries]
        rows.append(
            {
                "group": name,
                "anonymous_mib": round(statistics.median(a for a, _ in added), 1),
                "file_backed_mib": round(statistics.median(f for _, f in added), 1),
            }
        )
    loaded = rows[:-COMPARED]
    total = sum(r["anonymous_mib"] + r["file_backed_mib"] for r in loaded)
    print("| import | anonymous MiB | file-backed MiB |")
    print("|---|---:|---:|")
    for i, row in enumerate(rows):
        sign = "" if i == 0 else "+"
        print(f"| {row['group']} | {sign}{row['anonymous_mib']} | {sign}{row['file_backed_mib']} |")
    print(f"what a node in a cluster loads, before any work: {total:.1f} MiB")
    report(
        {
            "bench": "imports",
            "tries": args.tries,
            "groups": rows,
            "cluster_node_floor_mib": round(total, 1),
        }
    )


if __name__ == "__main__":
    main()
