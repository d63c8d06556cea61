"""Mutation testing of the pure core: deliberate one-line breaks, and whether a test notices.

Each mutant changes one thing in one module of the core: a comparison flipped or moved off its
boundary (`<` to `<=`, `==` to `!=`, `is` to `is not`, `in` to `not in`), `and` swapped with
`or`, a `not` dropped, an arithmetic operator swapped (`+`/`-`, `*`/`/`, `//` to `/`), a
constant changed (0 and 1 swapped, other numbers plus one, True and False swapped), a rounding
changed (`ceil`/`floor`, `min`/`max`, a `round()` dropped). Docstrings, strings, annotations,
decorators and log calls are left alone: a break there changes no figure.

Beside these line mutants, semantic mutants make the changes a competent person makes on a busy
day (`--semantic` runs only them): two chained `.replace()` calls in the other order (an escape
that no longer round-trips), a `strip()` dropped, two fallbacks of an `or` swapped, the guard
before a division dropped (the `if` that returns before dividing, or the `x / y if y else …`
that becomes `x / y`), and the refusal of several matches dropped (an `if len(found) != 1:
return …` removed, so the first match is taken), and the slips of issue 45: a guard moved
after the step it guards (`if len(seen) >= MAX: return` after `seen.append(x)`) or after the
next check (an admin-access claim judged once its device resolves), a duplicate kept first in
silence (`if key in seen: duplicates.add(key); continue` become `if key in seen: continue`),
`<` for `<=` (and back) against a named bound (`MAX_SLICES`, `self.limits.max_headers`), a
count one round late (`self.n += 1` after the line that reads it, `self.rounds + 1` become
`self.rounds`), a store keyed by something that may be None made unconditional (one entry every
keyless thing shares), and a unit slip (1024 for 1000 and back, MiB for MB, `2 << 20` for
`2 * 10**6`). Each mutant carries the requirement ids (`R-…`) its function's docstring cites,
else its module's, and the report lists survivors by requirement.

Beside the core, the newest modules are named by their path (`-m grants/dra`, `-m serve/http`,
`-m vendors/amd`): DRA, ranges, the server, access review, the self-signed pair's child,
self-metrics, the pod-resources read, and the vendors' health reads (only the functions ONLY
names), each with its own tests, fastest to kill first.

Every mutant runs the module's own tests (ordered fastest-to-kill first, stopping at the first
failure) in a private copy of the working tree, under a time limit; a mutant the tests pass is
a survivor. Survivors judged equivalent (no input can tell them from the original) are listed
in EQUIVALENT below, each with its reason, and counted out of the score.

    scripts/mutate                       # every core module, one job
    scripts/mutate -j 2 -m slices -m cgroup
    scripts/mutate --list -m grants      # the mutants, without running anything
    scripts/mutate --json report.json    # the outcome of every mutant
    scripts/mutate --semantic -j 2       # only the semantic mutants
    scripts/mutate --semantic -m grants/dra -m kube/dra   # newest modules, by path
    scripts/mutate --semantic --newest   # every newest module (PATHS) instead of the core

Not part of CI: on the 2-core development machine the whole core takes about 25 minutes with
-j 2; docs/design.md has the last run's table.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The pure core, and the tests that hold each module, most specific (and fastest) first.
FIGURES_TESTS = [
    "tests/test_figure_rules.py",
    "tests/test_figures.py",
    "tests/test_expected.py",
    "tests/test_golden.py",
    "tests/test_instance_metrics.py",
]
CORE_RULES = "tests/test_core_rules.py"
# The rules a person's bugs break (issue 34): cgroup lines, the pod index, escaping, absent and
# empty sections, and what the semantic mutants showed unpinned.
PERSON_RULES = ["tests/test_person_rules_core.py", "tests/test_person_rules_node.py"]
ISOLATION = "tests/test_isolation.py"  # one boundary per pod; what a round remembers of a pod
# Where each module lives, under devicemanager/: the core's steps are folders (docs/design.md).
STEP = {
    **dict.fromkeys(("cgroup", "pods", "attribution"), "node"),
    **dict.fromkeys(("allocations", "grants", "quantity"), "grants"),
    **dict.fromkeys(("figures", "slices", "snapshot", "exposition"), "figures"),
    "node": "grants",  # grants/node.py: the sources' precedence and the cross-pod rules
    **dict.fromkeys(("steps", "said"), "round"),
}


# The newest code outside the core's steps (issue 45), by its path under the repository: a
# module named by its path (`grants/dra`, `serve/http`, `vendors/amd`) is that file.
PATHS = {
    name: f"devicemanager/{name}.py"
    for name in (
        "grants/dra",
        "kube/dra",
        "figures/ranges",
        "serve/http",
        "serve/access",
        "serve/handshake",
        "serve/counters",
        "serve/app",
        "serve/mint",
        "agent/selfmetrics",
        "agent/monitor",
        "kube/podresources",
    )
} | {
    name: f"{name}.py"
    for name in (
        "vendors/_nvml_family",
        "vendors/amd",
        "vendors/_amd_smi",
        "vendors/ascend",
        "vendors/hygon",
        "vendors/metax",
    )
}
# A vendor module is mutated only in its health reads (the functions these names match): the
# rest of it is the library's calls, which its fixtures and fakes hold.
HEALTH = re.compile(r"health|xid|violation|throttl", re.IGNORECASE)
ONLY: dict[str, re.Pattern[str]] = {m: HEALTH for m in PATHS if m.startswith("vendors/")} | {
    # the monitor asks for its own figures in run_round: the rounds counted there (R-X8)
    "agent/monitor": re.compile(r"run_round"),
    # amd.py reads the violation status (and caches it by UUID) among its other figures
    "vendors/amd": re.compile(r"health|violation|_figures"),
}


def source_path(root: Path, module: str) -> Path:
    if module in PATHS:
        return root / PATHS[module]
    return root / "devicemanager" / STEP[module] / f"{module}.py"


TESTS: dict[str, list[str]] = {  # PERSON_RULES first for every module, added below
    "allocations": [CORE_RULES, "tests/test_allocations.py", *FIGURES_TESTS, ISOLATION],
    "grants": [
        CORE_RULES,
        *FIGURES_TESTS,
        "tests/test_allocations.py",
        ISOLATION,
        "tests/test_deviceplugins.py",
    ],
    "figures": [CORE_RULES, *FIGURES_TESTS, "tests/test_cluster_rules.py", ISOLATION],
    "slices": [CORE_RULES, "tests/test_slices.py", *FIGURES_TESTS, ISOLATION],
    "snapshot": [
        CORE_RULES,
        "tests/test_snapshot.py",
        "tests/test_expected.py",
        "tests/test_golden.py",
        "tests/test_instance_metrics.py",
        "tests/test_serving_rules.py",
        "tests/test_figure_rules.py",
    ],
    "exposition": [
        CORE_RULES,
        "tests/test_exposition.py",
        "tests/test_ranges.py",  # a refused card figure's capability sample
        "tests/test_figure_rules.py",
        "tests/test_expected.py",
        "tests/test_golden.py",
        "tests/test_serving_rules.py",
        "tests/test_monitor.py",
        "tests/test_podresources.py",
        "tests/test_dra.py",
    ],
    "node": [
        "tests/test_round.py",
        "tests/test_tenants.py",
        ISOLATION,
        "tests/test_allocations.py",
        "tests/test_deviceplugins.py",
        "tests/test_dra.py",
        CORE_RULES,
        *FIGURES_TESTS,
    ],
    "steps": [
        "tests/test_round.py",
        "tests/test_monitor.py",
        ISOLATION,
        "tests/test_deviceplugins.py",
        "tests/test_dra.py",
        "tests/test_tenants.py",
        "tests/test_expected.py",
        "tests/test_golden.py",
    ],
    "said": ["tests/test_round.py", "tests/test_monitor.py", ISOLATION, "tests/test_tenants.py"],
    "cgroup": [CORE_RULES, "tests/test_cgroup.py", "tests/test_attribution.py"],
    "pods": [CORE_RULES, "tests/test_pods.py", *FIGURES_TESTS, "tests/test_allocations.py"],
    "quantity": [CORE_RULES, "tests/test_instance_metrics.py"],
    "attribution": [
        CORE_RULES,
        "tests/test_attribution.py",
        # Real processes in real cgroups (as root): the steady path, pidfds, recycled PIDs.
        "tests/test_cgroup_kernel.py",
        "tests/test_figure_rules.py",
        "tests/test_figures.py",
        "tests/test_expected.py",
    ],
}

TESTS = {module: [*PERSON_RULES, *tests] for module, tests in TESTS.items()}

# The newest modules' tests (issue 45), the rules a person breaks first; no PERSON_RULES (the
# core's): each list is what holds that file, fastest to kill first.
BOUNDS_RULES = "tests/test_person_rules_bounds.py"
DRA_TESTS = [BOUNDS_RULES, "tests/test_dra.py", "tests/test_kube_dra.py", "tests/test_round.py"]
SERVE_TESTS = [
    BOUNDS_RULES,
    "tests/test_serving_rules.py",
    "tests/test_person_rules_serving.py",
    "tests/test_fast_path.py",
    "tests/test_selfmetrics.py",
    "tests/test_server.py",
    "tests/test_abuse.py",
]
VENDOR_TESTS = [BOUNDS_RULES, "tests/vendors/test_person_rules_vendors.py"]
TESTS |= {
    "grants/dra": DRA_TESTS,
    "kube/dra": [BOUNDS_RULES, "tests/test_kube_dra.py", "tests/test_dra.py"],
    "figures/ranges": [
        BOUNDS_RULES,
        "tests/test_ranges.py",
        "tests/test_figure_table.py",
        "tests/vendors/test_amd_fake.py",
    ],
    **dict.fromkeys(("serve/http", "serve/counters"), SERVE_TESTS),
    **dict.fromkeys(("serve/handshake", "serve/app"), SERVE_TESTS[:4]),
    "serve/access": [BOUNDS_RULES, "tests/test_access.py", "tests/test_person_rules_serving.py"],
    "serve/mint": [BOUNDS_RULES, "tests/test_self_signed.py", "tests/test_tls_rotation.py"],
    "agent/selfmetrics": [BOUNDS_RULES, "tests/test_selfmetrics.py", "tests/test_docs.py"],
    "agent/monitor": [BOUNDS_RULES, "tests/test_selfmetrics.py", "tests/test_monitor.py"],
    "kube/podresources": [BOUNDS_RULES, "tests/test_podresources.py"],
    "vendors/_nvml_family": [
        *VENDOR_TESTS,
        "tests/vendors/test_nvidia_parse.py",
        "tests/vendors/test_nvidia_fake.py",
        "tests/vendors/test_nvidia_kit.py",
    ],
    **{
        f"vendors/{name}": [
            *VENDOR_TESTS,
            f"tests/vendors/test_{vendor}_parse.py",
            f"tests/vendors/test_{vendor}_fake.py",
            f"tests/vendors/test_{vendor}_kit.py",
        ]
        for name, vendor in (
            ("amd", "amd"),
            ("_amd_smi", "amd"),
            ("ascend", "ascend"),
            ("hygon", "hygon"),
            ("metax", "metax"),
        )
    },
}

# Survivors that no input can tell from the original, by key, with the reason.
EQUIVALENT: dict[str, str] = {
    "attribution:attribute_device:True  ->  False": (
        "zip(strict=False): the outcomes are built from the rows, so the lengths always agree"
    ),
    "attribution:_start_and_state:20  ->  21": (
        "split(None, 21) instead of 20: the state (field 3) and the start time (field 22) are "
        "whole tokens under any split of 20 or more; only the unused remainder differs"
    ),
    "attribution:Resolver._identify:self._read(pid, 'comm').strip()  ->  self._read(pid, 'comm')": (
        "comm feeds only a startswith() test; the kernel writes it with one trailing newline, "
        "which startswith ignores; leading whitespace would be a name the tenant chose, and "
        "MPS's daemons never do"
    ),
    "cgroup:parse_path:1  ->  0#2": (
        "searching from the pod segment itself: a pod segment (pod<uid>, ...-pod<uid>.slice) "
        "never matches a container id or a runtime scope"
    ),
    "exposition:Labels.render:check after the next: if len(extra_names) > 1 ... after if "
    "len(extra_values) != len(extra_names) ...": (
        "a set of two labels more with a value missing is refused either way: labelset "
        "raises the same ValueError the count check would"
    ),
    "exposition:Labels._around:name < key[0]  ->  name <= key[0]": (
        "a name equal to the added label's is refused two lines above, so no base name "
        "compares equal here"
    ),
    "exposition:Labels._around:name > key[0]  ->  name >= key[0]": (
        "as `<=` above: a base name equal to the added label's never reaches the split"
    ),
    "exposition:activity_families:True  ->  False": (
        "zip(strict=False) over the families and the table's grant activity families they "
        "were made from, one for one: the lengths always agree"
    ),
    "exposition:verdict_families:0  ->  1#4": (
        "`snapshot.timestamp > 1`: a snapshot's timestamp is 0 before the first round and a "
        "unix time after it, never in between"
    ),
    "exposition:Exposition.of:1  ->  0": (
        "another compression level (0 stores the text uncompressed, still gzip): other bytes, "
        "the same text when decompressed, still a pure function of the text"
    ),
    "figures:newest_pods:(pod.created or '', pod.name) > (current[1].created or '', "
    "current[...  ->  (pod.created or '', pod.name) >= (current[1].created or '', "
    "current...": (
        "a tie needs two live pods of one Instance with the same creation time and name; "
        "owner references never cross namespaces, so that is one namespace and name, which "
        "the API server never holds twice at once"
    ),
    "figures:exported:0  ->  1": (
        "sorting by the pod's namespace instead of the Instance's: they are the same "
        "(instance_of takes the pod's namespace)"
    ),
    "figures:pod_level:0  ->  1": (
        "sorting by the pod's namespace instead of the Instance's: they are the same"
    ),
    "grants:merged:1  ->  0": (
        "a group of one then goes through replace() and comes out an equal Grant: its index, "
        "units and memory are its own, and its containers are already unique"
    ),
    "node:combine:1  ->  0": (
        "the kubelet's word merged from one source: a source's grants are already merged "
        "(grants_from), and merging them again gives the same grants"
    ),
    "node:combine:len(allocated) > 1  ->  len(allocated) >= 1": (
        "the same: merging one source's already merged grants gives the same grants"
    ),
    "node:_within_node_bound:sum((len(g) for g in by_pod.values())) <= MAX_GRANTS_PER_NODE  ->  sum((len(g) for g in by_pod.values())) < MAX_GRANTS_PER_NODE": (  # noqa: E501
        "at exactly the bound the oldest-first path keeps every pod too: the same grants, "
        "only by_pod's order differs (age instead of the index's), which nothing reads"
    ),
    "grants:cores_cap:0 < cap <= 100  ->  0 < cap < 100": (
        "a cap of exactly 100 then takes the other branch, which is 100.0 as well"
    ),
    "grants:ceil_restated:0 < cap <= 100  ->  0 < cap < 100": (
        "a cap of exactly 100 then takes the other branch, which is 100.0 as well"
    ),
    "grants:ceil_restated:9  ->  10": (
        "rounding to 10 places instead of 9 before ceil: both absorb the binary error of "
        "x * 100 / cap (about 1e-14 of it); they differ only for inputs with 10 significant "
        "decimals, which no vendor reports"
    ),
    "exposition:_escape:value.replace('\\\\', '\\\\\\\\').replace('\\n', '\\\\n').replace('\"', "
    "'\\\\\"')  ->  value.replace('\\\\', '\\\\\\\\').replace('\"', '\\\\\"')"
    ".replace('\\n', '\\\\n')": (
        "the quote and the newline escapes in the other order: neither writes the other's "
        "character, so every value comes out the same"
    ),
    "grants/dra:inventory_of:guard after its step: if len(by_name) >= MAX_CLAIMS ... after "
    "by_name[claim.namespace, claim.name] = claim": (
        "stopping right after the 2,048th claim is stored instead of before the 2,049th: the "
        "same 2,048 claims either way (a claim named again only rewrites its own entry)"
    ),
    "kube/dra:SliceReflector.replace_all:f'{item.reason}, {item.size} characters "
    "{jsonlist.named(item.raw)}'...  ->  f'{item.reason}, {item.size} characters "
    "{jsonlist.named(item.raw)}'": (
        "the strip() of a refusal's detail, which only the log line carries: no figure or "
        "count depends on it"
    ),
    "figures/ranges:_card:guard after its step: if not invalid and health is card.health ... "
    "after refused.extend((f'{path}.{name}' for name in invalid))": (
        "when the guard returns, `invalid` is empty: extending `refused` by nothing first "
        "changes nothing"
    ),
    "figures/ranges:_health:guard after its step: if not invalid ... after "
    "refused.extend((f'{path}.{name}' for name in invalid))": (
        "when the guard returns, `invalid` is empty: extending `refused` by nothing first "
        "changes nothing"
    ),
    "kube/dra:RuleReflector.run_once:guard after its step: if exc.status != 404 ... after "
    "self._served = None": (
        "forgetting the version read before an error other than 404 is raised only makes the "
        "next list ask the versions again from the newest, which answers the same one: the "
        "same rules, held the same way"
    ),
    **{
        f"kube/podresources:describe:check after the next: if isinstance(exc, {a}) ... after "
        f"if isinstance(exc, {b}) ...": (
            f"{a} and {b} are disjoint (no exception is both), so which is asked first "
            "decides nothing"
        )
        for a, b in (
            ("GrpcError", "Refused"),
            ("Refused", "DecodeError"),
            ("DecodeError", "OSError"),
        )
    },
    "vendors/_nvml_family:parse_xid_counts:check after the next: if (code := _error(value)) "
    "is not None ... after if not isinstance(value, Mapping) or len(value) > MAX_ERROR_... ...": (
        "a recorded failure is a Mapping of two or three keys (error, code, message), never "
        "past 65: the shape test lets it through to the error test either way"
    ),
    "vendors/amd:AmdBackend._figures:kept under None: self._violation[uuid] = held": (
        "the look-up above never asks for a board without a UUID (`held` is None for it), so "
        "an entry under None is never read; both guards dropped together, the shared answer "
        "is caught by test_amd_boards_that_do_not_answer_their_uuid_each_read_their_own_violations"
    ),
    "vendors/_nvml_family:NvmlFamilyBackend._register_xid_events:guard after its step: if "
    "_error(events) is not None ... after self._events_failed = None": (
        "the guard's branch sets `_events_failed` to the failure itself, so clearing it first "
        "is overwritten; past the guard it is cleared either way"
    ),
    "vendors/_amd_smi:throttle:check after the next: if (code := error_code(answer)) is not "
    "None ... after if not isinstance(answer, Mapping) ...": (
        "only a Mapping carries an error code (vendors/_common.error_code): the two tests "
        "never both hold, so their order decides nothing"
    ),
    "vendors/hygon:_unhealthy:_cannot(identity) or _cannot(memory)  ->  "
    "_cannot(memory) or _cannot(identity)": (
        "an `or` of two pure tests of values already read: either order, the same answer"
    ),
    "vendors/hygon:HygonBackend._health:check after the next: if rc != lib.RSMI_SUCCESS ... "
    "after if count.value > MAX_RETIRED_PAGES ...": (
        "`count` starts at 0 and only a probe that succeeds writes it (ROCm SMI returns before "
        "touching its output on an error): a failed probe is never past the bound, so it "
        "reaches the rc test either way"
    ),
    "serve/mint:names_message:guard after its step: if not raw or b'\\n' in raw or len(raw) "
    "> MAX_NAME_BYTES ... after lines.append(raw + b'\\n')": (
        "the guard raises: the line appended first is thrown away with the whole message"
    ),
    "serve/mint:read_names:check after the next: if line == b'\\n' ... after if not line ...": (
        "an empty read and a line break alone never both hold: their order decides nothing"
    ),
    "kube/dra:_names:check after the next: if requirement.get('operator') == 'In' ... after "
    "if requirement.get('operator') == 'NotIn' ...": (
        "one operator is never both In and NotIn: their order decides nothing"
    ),
    "kube/dra:SliceReflector._refuse:check after the next: if key is not None and "
    "self._refused_names.get(key) == reason ... after if key is not None and "
    "len(self._refused_names) >= MAX_SLICES ...": (
        "both checks only return, before the same count and after it nothing: a slice that "
        "passes neither is logged either way, one that meets either is not"
    ),
    "kube/dra:SliceReflector._admit:check after the next: if before is None and len(entries) "
    ">= MAX_SLICES ... after if devices > dra.MAX_SLICE_DEVICES ...": (
        "both refuse with the same reason (too_many_slices) and keep `held`: only the log "
        "line's detail says which bound, and no figure or count depends on it"
    ),
    "serve/access:_user:doc.get('groups') or []  ->  [] or doc.get('groups')": (
        "`[] or x` is x: a missing or empty groups value then fails the list test below and "
        "gives no groups, as [] does"
    ),
    "serve/access:_user:doc.get('extra') or {}  ->  {} or doc.get('extra')": (
        "`{} or x` is x: a missing or empty extra then fails the dict test below and gives no "
        "extra, as {} does"
    ),
    "serve/http:BoundedHttpProtocol.data_received:guard after its step: if self.refused or "
    "self.closing ... after self.sent_any = True": (
        "a refused connection is closing (refuse closes it, the pipelining bound aborts it), "
        "and `sent_any` is read only of connections not closing: setting it on one changes "
        "nothing"
    ),
    "serve/http:BoundedHttpProtocol.on_header:guard after its step: if not "
    "self._within_header_bound(len(name) + len(value) + 4) ... after self.header_count += 1": (
        "the field past the byte bound refuses the request: every later callback returns on "
        "`refused`, so the count it added is never read"
    ),
    "serve/http:BoundedHttpProtocol.on_header:guard after its step: if self.header_count > "
    "self.limits.max_headers ... after super().on_header(name, value)": (
        "a request with too many fields is refused (431) when its section ends whatever was "
        "kept; the fields kept meanwhile are bounded by the 32 KiB section and go with it"
    ),
    "serve/http:BoundedHttpProtocol.on_headers_complete:guard after its step: if self.refused "
    "... after self.headers_done = True": (
        "`headers_done` is read by data_received (which returns first on a refused "
        "connection) and to label a refusal already counted: setting it then changes nothing"
    ),
    "serve/http:BoundedHttpProtocol.on_headers_complete:check after the next: if "
    "len(self.pipeline) >= MAX_PIPELINED ... after if self._take_fast() ...": (
        "_take_fast declines whenever anything is queued (`or self.pipeline`), so a full "
        "queue reaches the bound either way"
    ),
    **{
        "serve/http:BoundedHttpProtocol._take_fast:check after the next: " + pair: (
            "each check only declines (returns False) and none can raise: any order declines "
            "the same requests"
        )
        for pair in (
            "if routes is None or self.parser.get_method() != b'GET' or s... ... after if "
            "self.flow.write_paused ...",
            "if self.flow.write_paused ... after if self.cycle is not None and (not "
            "self.cycle.response_compl... ...",
            "if self.cycle is not None and (not self.cycle.response_compl... ... after if "
            "self.parser.should_upgrade() ...",
        )
    },
    "serve/http:BoundedHttpProtocol.on_body:guard after its step: if self.refused ... after "
    "self.body_bytes += len(body)": (
        "a refused request's body count is never read again: the guard returns either way"
    ),
    "serve/http:BoundedHttpProtocol.on_url:guard after its step: if self.refused ... after "
    "super().on_url(url)": (
        "once refused, the request's target is never read again (its refusal was labelled "
        "when it was made): appending to it first changes nothing"
    ),
    "serve/http:BoundedHttpProtocol.on_message_complete:guard after its step: if self.cycle "
    "is None ... after super().on_message_complete()": (
        "past the refused and fast returns the cycle is None only for an upgrade uvicorn takes "
        "(its on_headers_complete returns before making one), and uvicorn's "
        "on_message_complete returns first on exactly that condition"
    ),
    "serve/app:accepts_gzip:part.strip()  ->  part": (
        "the coding is stripped after the split, and the parameters are read with every space "
        "removed: the part's own strip adds nothing"
    ),
    "serve/app:Routes.answer:check after the next: if path == LANDING ... after if path == "
    "'/metrics' ...": ("one path is never two: the order of equality tests decides nothing"),
    "serve/app:Routes.answer:check after the next: if path == '/metrics' ... after if path == "
    "'/monitor/snapshot' ...": (
        "one path is never two: the order of equality tests decides nothing"
    ),
    "agent/selfmetrics:_counted_by:0  ->  1": (
        "both callers' counts start with every value at 0 and only add (HttpCounters: "
        "dict.fromkeys(REASONS, 0); the Event writer: dict.fromkeys(OUTCOMES, 0)): the default "
        "of the .get is never read"
    ),
    "kube/dra:SliceReflector.apply:check after the next: if key is None ... after if "
    "event.type == 'DELETED' ...": (
        "the key is None for a bookmark, never a deletion, and for a nameless object, whose "
        "deletion pops nothing (no entry is kept under None): either order returns having "
        "changed nothing"
    ),
    "kube/dra:DraSource.__call__:check after the next: if all((r.absent for r in "
    "self.reflectors)) ... after if not all((r.synced for r in self.reflectors)) ...": (
        "a reflector that found no resource.k8s.io API is synced too (_absent sets both, and "
        "only the constructor clears `synced`): all absent passes the synced test either way"
    ),
    "pods:pod_info:isinstance(spec, Mapping) and isinstance(status, Mapping)  ->  "
    "isinstance(spec, Mapping) or isinstance(status, Mapping)": (
        "an assert for the type checker: the two lines above make both Mappings always"
    ),
}


@dataclass(frozen=True)
class Mutant:
    module: str
    number: int  # its place among the module's mutants
    line: int
    where: str  # the enclosing function or class
    change: str  # what was broken, as source
    key: str  # module:where:change, stable across unrelated edits
    kind: str = "line"  # "line" or "semantic"
    requirements: tuple[str, ...] = ()  # the ids its function's docstring cites, else its module's


def _short(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 70 else text[:67] + "..."


_COMPARE_FLIPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_BINOP_SWAPS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
}
_CALL_SWAPS = {"ceil": "floor", "floor": "ceil", "min": "max", "max": "min"}
_LOGGERS = {"log", "logger", "logging"}


REQUIREMENT = re.compile(r"\bR-[A-Z]{1,2}\d{1,2}\b")
_STRIPS = {"strip", "lstrip", "rstrip"}
_DIVISIONS = (ast.Div, ast.FloorDiv, ast.Mod)
# Calls that answer yes or no: an `or` of them is a condition, not two fallbacks.
_PREDICATES = {
    "isinstance",
    "issubclass",
    "callable",
    "hasattr",
    "any",
    "all",
    "bool",
    "match",
    "fullmatch",
    "search",
    "startswith",
    "endswith",
    "isdigit",
    "isascii",
}


def _is_condition(node: ast.AST) -> bool:
    if isinstance(node, ast.Compare | ast.UnaryOp | ast.BoolOp):
        return True
    if isinstance(node, ast.Call):
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        return name in _PREDICATES or name.startswith(("is_", "has_")) or "_after" in name
    return isinstance(node, ast.Constant) and isinstance(node.value, bool)


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


def _divisors(node: ast.AST) -> set[str]:
    """The names any division under `node` divides by, and the names those were assigned from
    (`allowance = cap if cap > 0 else 100` makes `cap` a divisor of `x / allowance`)."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.BinOp) and isinstance(n.op, _DIVISIONS):
            out |= _names(n.right)
    assigned = [
        (t.id, n.value)
        for n in ast.walk(node)
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    ]
    for _ in range(3):  # a few steps of assignment are enough for the core's code
        for name, value in assigned:
            if name in out:
                out |= _names(value)
    return out


def _has_division(node: ast.AST) -> bool:
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, _DIVISIONS) for n in ast.walk(node))


def _refuses_several(test: ast.AST) -> bool:
    """`len(x) != 1`, `len(x) > 1`, `len(x) >= 2`, `1 < len(x)`: a refusal of several matches."""
    if not isinstance(test, ast.Compare) or len(test.ops) != 1:
        return False
    left, right, op = test.left, test.comparators[0], test.ops[0]

    def is_len(n: ast.AST) -> bool:
        return isinstance(n, ast.Call) and getattr(n.func, "id", None) == "len"

    def const(n: ast.AST) -> object:
        return n.value if isinstance(n, ast.Constant) else None

    if is_len(left):
        return (isinstance(op, ast.NotEq | ast.Gt) and const(right) == 1) or (
            isinstance(op, ast.GtE) and const(right) == 2
        )
    if is_len(right):
        return isinstance(op, ast.Lt) and const(left) == 1
    return False


def _leaves(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], ast.Return | ast.Continue | ast.Raise | ast.Break)


_ORDERINGS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
_BOUND_WORDS = {"max", "min", "limit", "bound", "cap", "most", "least"}


def _is_bound(node: ast.AST) -> bool:
    """Whether `node` names a bound: a named constant (`MAX_SLICES`, `dra.MAX_NAME`) or a
    setting whose name says it is one (`self.max_connections`, `limit`)."""
    for n in ast.walk(node):
        name = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else ""
        if len(name) > 1 and (name.isupper() or _BOUND_WORDS & set(name.lower().split("_"))):
            return True
    return False


def _is_guard(stmt: ast.stmt) -> bool:
    """`if …: …; return` (or continue, raise, break) with no else: a check that stops a step."""
    return isinstance(stmt, ast.If) and not stmt.orelse and _leaves(stmt.body)


def _is_step(stmt: ast.stmt) -> bool:
    """A statement that changes state: a call made for its effect (not a log line), a store
    into a container or an attribute, a count."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        func = stmt.value.func
        return not (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id in _LOGGERS
        )
    if isinstance(stmt, ast.AugAssign):
        return True
    return isinstance(stmt, ast.Assign) and any(
        isinstance(t, ast.Subscript | ast.Attribute) for t in stmt.targets
    )


def _is_count(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add)


def _reads(stmt: ast.stmt, target: ast.expr) -> bool:
    text = ast.unparse(target)
    return any(
        isinstance(n, ast.Name | ast.Attribute | ast.Subscript)
        and isinstance(n.ctx, ast.Load)
        and ast.unparse(n) == text
        for n in ast.walk(stmt)
    )


def _guards_a_store_by(node: ast.If) -> bool:
    """`if key is not None: table[key] = value` (nothing else, no else)."""
    test = node.test
    if not (
        isinstance(test, ast.Compare)
        and isinstance(test.ops[0], ast.IsNot)
        and len(test.ops) == 1
        and isinstance(test.left, ast.Name)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    ):
        return False
    if node.orelse or len(node.body) != 1 or not isinstance(node.body[0], ast.Assign):
        return False
    key = test.left.id
    return any(
        isinstance(t, ast.Subscript) and key in _names(t.slice) for t in node.body[0].targets
    )


def _first_line(node: ast.AST) -> str:
    text = ast.unparse(node).splitlines()[0]
    return text if len(text) <= 60 else text[:57] + "..."


# A unit's two spellings: a binary factor for its decimal one and back (MiB for MB, KiB for kB).
_UNIT_SLIPS = {
    1024: 1000,
    1000: 1024,
    1 << 20: 10**6,
    10**6: 1 << 20,
    1 << 30: 10**9,
    10**9: 1 << 30,
}
_UNIT_NAMES = {"KIB": 1000, "MIB": 10**6, "GIB": 10**9}


class Mutator(ast.NodeTransformer):
    """Walks a module in a fixed order, numbering every possible mutation; applies the one
    numbered `target` (or none, with -1) and records all of them."""

    def __init__(self, target: int = -1) -> None:
        self.target = target
        self.count = 0
        self.scope: list[str] = []
        self.found: list[tuple[int, str, str, str, tuple[str, ...]]] = []
        self.applied = False
        self.requirements: list[tuple[str, ...]] = []  # by scope: the ids its docstring cites
        self.divisors: list[set[str]] = []  # by function: the names it divides by
        self.tests: set[int] = set()  # ids of the nodes that are an if's, while's or assert's test

    def _cited(self, node: ast.Module | ast.ClassDef | ast.FunctionDef) -> tuple[str, ...]:
        doc = ast.get_docstring(node)
        return tuple(sorted(set(REQUIREMENT.findall(doc or ""))))

    def visit_Module(self, node: ast.Module) -> ast.AST:
        self.requirements.append(self._cited(node))
        node.body = [self.visit(s) for s in node.body]
        self.requirements.pop()
        return node

    def _offer(
        self,
        node: ast.AST,
        make: Callable[[], ast.AST],
        kind: str = "line",
        change: str | None = None,
    ) -> ast.AST | None:
        number = self.count
        self.count += 1
        mutated = make()
        where = ".".join(self.scope) or "<module>"
        change = change or f"{_short(node)}  ->  {_short(mutated)}"
        cited = next((ids for ids in reversed(self.requirements) if ids), ())
        self.found.append((getattr(node, "lineno", 0), where, change, kind, cited))
        if number == self.target:
            self.applied = True
            return mutated
        return None

    def generic_visit(self, node: ast.AST) -> ast.AST:
        node = super().generic_visit(node)
        for name in ("body", "orelse", "finalbody"):
            stmts = getattr(node, name, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                setattr(node, name, self._statements(stmts))
        return node

    def _statements(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        """Two neighbours in the other order: a guard moved after the step it guards (`if
        len(seen) >= MAX: return` after `seen.append(x)`), or a count read before it is made
        (`self.rounds += 1` after the line that reports `self.rounds`: one round late)."""
        for i in range(len(stmts) - 1):
            first, second = stmts[i], stmts[i + 1]
            change = None
            if _is_guard(first) and _is_step(second):
                assert isinstance(first, ast.If)
                change = (
                    f"guard after its step: if {_first_line(first.test)} ... "
                    f"after {_first_line(second)}"
                )
            elif _is_guard(first) and _is_guard(second):
                # Two checks in the other order: the first one judged only once the second let
                # the step through (an admin-access claim judged once its device resolves).
                assert isinstance(first, ast.If) and isinstance(second, ast.If)
                change = (
                    f"check after the next: if {_first_line(first.test)} ... "
                    f"after if {_first_line(second.test)} ..."
                )
            elif _is_count(first) and _reads(second, first.target):  # type: ignore[attr-defined]
                change = f"count one round late: {_first_line(first)} after {_first_line(second)}"
            if change and self._offer(first, lambda f=first: f, "semantic", change) is not None:
                return [*stmts[:i], second, first, *stmts[i + 2 :]]
        return stmts

    # -- what is never mutated -------------------------------------------------------------

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        # Decorators and annotations are left alone; default values are figures too.
        self.scope.append(node.name)
        self.requirements.append(self._cited(node))
        self.divisors.append(_divisors(node))
        node.args.defaults = [self.visit(d) for d in node.args.defaults]
        node.args.kw_defaults = [d if d is None else self.visit(d) for d in node.args.kw_defaults]
        node.body = self._statements([self.visit(s) for s in node.body])
        self.divisors.pop()
        self.requirements.pop()
        self.scope.pop()
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        self.scope.append(node.name)
        self.requirements.append(self._cited(node))
        node.body = [self.visit(s) for s in node.body]
        self.requirements.pop()
        self.scope.pop()
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        if node.value is not None:
            node.value = self.visit(node.value)
        return node

    def visit_Import(self, node: ast.Import) -> ast.AST:
        return node

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST:
        return node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        return node

    def _mark_test(self, test: ast.AST) -> None:
        self.tests.add(id(test))

    def visit_While(self, node: ast.While) -> ast.AST:
        self._mark_test(node.test)
        return self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        self._mark_test(node.test)
        return self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> ast.AST:
        for test in node.ifs:
            self._mark_test(test)
        return self.generic_visit(node)

    def visit_If(self, node: ast.If) -> ast.AST:
        if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return node
        self._mark_test(node.test)
        node = self.generic_visit(node)  # type: ignore[assignment]
        if _guards_a_store_by(node):
            # `if uuid is not None: cache[uuid] = x` -> `cache[uuid] = x`: whatever has no key
            # is stored under None, one entry every keyless thing then shares.
            store = node.body[0]
            found = self._offer(
                node,
                lambda: copy.deepcopy(store),
                "semantic",
                f"kept under None: {_first_line(store)}",
            )
            if found is not None:
                return found
        if node.orelse or not _leaves(node.body):
            return node
        if len(node.body) > 1 and any(
            isinstance(n, ast.Compare) and any(isinstance(op, ast.In) for op in n.ops)
            for n in ast.walk(node.test)
        ):
            # `if key in seen: duplicates.add(key); continue` -> `if key in seen: continue`:
            # a duplicate (or a refusal) no longer recorded, the first kept in silence.
            leave = node.body[-1]
            found = self._offer(
                node,
                lambda: ast.If(copy.deepcopy(node.test), [copy.deepcopy(leave)], []),
                "semantic",
                f"first kept silently: if {_first_line(node.test)}: {_first_line(leave)}",
            )
            if found is not None:
                return found
        divisors = self.divisors[-1] if self.divisors else set()
        # A guard before a division (`if not total: return None`), or the refusal of several
        # matches (`if len(found) != 1: return None`): dropped, the code goes on past it.
        if _refuses_several(node.test) or (divisors and _names(node.test) & divisors):
            return self._offer(node, lambda: ast.Pass(), "semantic") or node
        return node

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        self._mark_test(node.test)
        node = self.generic_visit(node)  # type: ignore[assignment]
        # `x / y if y else None` -> `x / y`, and `d = y if y > 0 else 1` -> `d = y` before a
        # division by `d`: the guard before the division dropped.
        divisors = self.divisors[-1] if self.divisors else set()
        for branch in (node.body, node.orelse):
            guarded = _has_division(branch) and _names(node.test) & _divisors(branch)
            if guarded or (branch is node.body and _names(node.test) & divisors):
                found = self._offer(node, lambda b=branch: copy.deepcopy(b), "semantic")
                if found is not None:
                    return found
                if not guarded:
                    break
        return node

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        if isinstance(node.value, ast.Constant):
            return node  # a docstring or a bare constant
        return self.generic_visit(node)

    # -- what is ---------------------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> ast.AST:
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id in _LOGGERS
        ):
            return node  # a log line: no figure depends on it
        node = self.generic_visit(node)  # type: ignore[assignment]
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name in _STRIPS and isinstance(func, ast.Attribute) and not node.args:
            receiver = func.value
            return self._offer(node, lambda: copy.deepcopy(receiver), "semantic") or node
        if (
            name == "replace"
            and isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Call)
            and isinstance(func.value.func, ast.Attribute)
            and func.value.func.attr == "replace"
        ):
            inner = func.value

            def reordered() -> ast.AST:
                # Y.replace(c, d).replace(a, b)  ->  Y.replace(a, b).replace(c, d)
                assert isinstance(inner.func, ast.Attribute)
                first = ast.Call(
                    ast.Attribute(copy.deepcopy(inner.func.value), "replace", ast.Load()),
                    copy.deepcopy(node.args),
                    [],
                )
                return ast.Call(
                    ast.Attribute(first, "replace", ast.Load()), copy.deepcopy(inner.args), []
                )

            return self._offer(node, reordered, "semantic") or node
        if name in _CALL_SWAPS:

            def swapped() -> ast.AST:
                out = copy.deepcopy(node)
                if isinstance(out.func, ast.Attribute):
                    out.func.attr = _CALL_SWAPS[name]
                else:
                    out.func = ast.Name(_CALL_SWAPS[name], ast.Load())
                return out

            return self._offer(node, swapped) or node
        if name == "round" and isinstance(func, ast.Name) and node.args:
            return self._offer(node, lambda: copy.deepcopy(node.args[0])) or node
        return node

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        for i, op in enumerate(node.ops):
            flip = _COMPARE_FLIPS.get(type(op))
            if flip is None:
                continue

            def flipped(i: int = i, flip: type[ast.cmpop] = flip) -> ast.AST:
                out = copy.deepcopy(node)
                out.ops[i] = flip()
                return out

            # `<` for `<=` against a named bound: off by one at the bound, a person's bug.
            operands = [node.left, *node.comparators]
            at_bound = isinstance(op, _ORDERINGS) and (
                _is_bound(operands[i]) or _is_bound(operands[i + 1])
            )
            found = self._offer(node, flipped, "semantic" if at_bound else "line")
            if found is not None:
                return found
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        in_test = id(node) in self.tests
        node = self.generic_visit(node)  # type: ignore[assignment]

        def swapped() -> ast.AST:
            out = copy.deepcopy(node)
            out.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            return out

        found = self._offer(node, swapped)
        if found is not None:
            return found
        if (
            isinstance(node.op, ast.Or)
            and not in_test
            and not any(_is_condition(v) for v in node.values)
            # `x or ""` is a default, not a second fallback: swapped it only ever leaks x
            and not any(isinstance(v, ast.Constant) for v in node.values)
        ):
            # `a or b` -> `b or a`: two fallbacks in the other order.
            def reversed_fallbacks() -> ast.AST:
                out = copy.deepcopy(node)
                out.values = list(reversed(out.values))
                return out

            return self._offer(node, reversed_fallbacks, "semantic") or node
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        if isinstance(node.op, ast.Not):
            return self._offer(node, lambda: copy.deepcopy(node.operand)) or node
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        factor = _UNIT_NAMES.get(node.id)
        if factor is None or not isinstance(node.ctx, ast.Load):
            return node
        return self._offer(node, lambda: ast.Constant(factor), "semantic") or node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        left, right = node.left, node.right
        if (
            isinstance(node.op, ast.LShift)
            and isinstance(left, ast.Constant)
            and isinstance(right, ast.Constant)
            and right.value in (10, 20, 30)
        ):
            # `2 << 20` (MiB) for `2 * 10**6` (MB): a unit slip.
            decimal = ast.BinOp(
                copy.deepcopy(left), ast.Mult(), ast.Constant(1000 ** (right.value // 10))
            )
            return self._offer(node, lambda: decimal, "semantic") or node
        if (
            isinstance(node.op, ast.Add)
            and isinstance(left, ast.Attribute)
            and isinstance(right, ast.Constant)
            and right.value == 1
        ):
            # `self.rounds + 1` -> `self.rounds`: the count as of the round before.
            found = self._offer(node, lambda: copy.deepcopy(left), "semantic")
            if found is not None:
                return found
        swap = _BINOP_SWAPS.get(type(node.op))
        if swap is None:
            return node

        def swapped() -> ast.AST:
            out = copy.deepcopy(node)
            out.op = swap()
            return out

        return self._offer(node, swapped) or node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        value = node.value
        if isinstance(value, bool):
            new: object = not value
        elif isinstance(value, int):
            new = {0: 1, 1: 0}.get(value, value + 1)
            slip = _UNIT_SLIPS.get(value)
            if slip is not None:
                found = self._offer(node, lambda: ast.Constant(slip), "semantic")
                if found is not None:
                    return found
        elif isinstance(value, float):
            new = value + 1.0
        else:
            return node
        return self._offer(node, lambda: ast.Constant(new)) or node


def enumerate_mutants(module: str, source: str | None = None) -> list[Mutant]:
    if source is None:
        source = source_path(REPO, module).read_text()
    mutator = Mutator()
    mutator.visit(ast.parse(source))
    seen: dict[str, int] = {}
    out = []
    only = ONLY.get(module)
    for number, (line, where, change, kind, cited) in enumerate(mutator.found):
        base = f"{module}:{where}:{change}"
        seen[base] = seen.get(base, 0) + 1
        key = base if seen[base] == 1 else f"{base}#{seen[base]}"
        if only is None or only.search(where):
            out.append(Mutant(module, number, line, where, change, key, kind, cited))
    return out


def mutated_source(module: str, number: int, source: str) -> str:
    mutator = Mutator(number)
    tree = mutator.visit(ast.parse(source))
    if number >= 0 and not mutator.applied:
        raise RuntimeError(f"{module}: mutant {number} was not applied")
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


# -- running --------------------------------------------------------------------------------


def working_copy(into: Path) -> None:
    """The working tree as `git status` sees it (tracked and untracked, not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for raw in filter(None, listed):
        rel = raw.decode()
        src = REPO / rel
        if not src.is_file():
            continue  # deleted in the working tree
        dst = into / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)


@dataclass
class Outcome:
    mutant: Mutant
    status: str  # killed, survived, timeout
    seconds: float
    detail: str = ""


def run_tests(workdir: Path, module: str, timeout: float) -> tuple[str, float, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEVICEMANAGER_", "PYTEST"))}
    env.update(PYTHONPATH=str(workdir), PYTHONDONTWRITEBYTECODE="1")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-x",
        "-q",
        "-p",
        "no:cacheprovider",
        "--no-header",
        "--tb=line",
        # A private base for tmp_path: pytest prunes old ones under a shared base, and two
        # sessions pruning at once (other jobs, other suites) fail each other's tests.
        f"--basetemp={workdir / '.pytest-tmp'}",
        *TESTS[module],
    ]
    started = time.monotonic()
    try:
        done = subprocess.run(
            cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - started, ""
    took = time.monotonic() - started
    tail = (done.stdout + done.stderr).strip().splitlines()
    detail = next((line for line in tail if line.startswith(("FAILED", "ERROR"))), "")
    return ("survived" if done.returncode == 0 else "killed"), took, detail or tail[-1:][0]


class Workspace:
    """One private copy of the working tree per job; a mutant is written in, run, undone.

    Every copy is of one snapshot taken when the run starts, and a module is restored from
    that snapshot, never from the tree: the tree may be edited while a run of half an hour
    goes on, and a run must measure one version of the code."""

    def __init__(self, root: Path, snapshot: Path | None = None) -> None:
        self.root = root
        if snapshot is None:
            working_copy(root)
        else:
            shutil.copytree(snapshot, root, symlinks=True)
        self.originals: dict[str, str] = {}

    def original(self, module: str) -> str:
        if module not in self.originals:
            self.originals[module] = source_path(self.root, module).read_text()
        return self.originals[module]

    def install(self, module: str, source: str) -> None:
        target = source_path(self.root, module)
        target.write_text(source)
        for stale in (target.parent / "__pycache__").glob(f"{target.stem}.*.pyc"):
            stale.unlink()

    def restore(self, module: str) -> None:
        self.install(module, self.original(module))


def baseline(ws: Workspace, module: str) -> float:
    """The module's tests over the original, and over the original as the mutator writes it
    back (ast.unparse): both must pass, or a 'kill' would mean nothing."""
    for source in (ws.original(module), mutated_source(module, -1, ws.original(module))):
        ws.install(module, source)
        status, took, detail = run_tests(ws.root, module, timeout=600)
        if status != "survived":
            ws.restore(module)
            raise SystemExit(f"mutate: {module}'s tests fail without any mutant: {detail}")
    ws.restore(module)
    return took


def run(mutants: list[Mutant], jobs: int, report: Callable[[Outcome], None]) -> list[Outcome]:
    modules = sorted({m.module for m in mutants})
    with tempfile.TemporaryDirectory(prefix="devicemanager-mutate-") as tmp:
        first = Workspace(Path(tmp) / "job0")
        spaces = [first] + [
            Workspace(Path(tmp) / f"job{i}", snapshot=first.root) for i in range(1, jobs)
        ]
        for module in modules:
            listed = [m.key for m in mutants if m.module == module]
            snapped = {m.key for m in enumerate_mutants(module, first.original(module))}
            if not set(listed) <= snapped:
                raise SystemExit(f"mutate: {module} changed since its mutants were listed")
        limits = {m: 3 * baseline(spaces[0], m) + 15 for m in modules}
        work: queue.Queue[Mutant] = queue.Queue()
        for m in mutants:
            work.put(m)
        outcomes: list[Outcome] = []
        lock = threading.Lock()

        def worker(ws: Workspace) -> None:
            while True:
                try:
                    m = work.get_nowait()
                except queue.Empty:
                    return
                ws.install(m.module, mutated_source(m.module, m.number, ws.original(m.module)))
                status, took, detail = run_tests(ws.root, m.module, limits[m.module])
                ws.restore(m.module)
                outcome = Outcome(m, status, round(took, 2), detail)
                with lock:
                    outcomes.append(outcome)
                    report(outcome)

        threads = [threading.Thread(target=worker, args=(ws,)) for ws in spaces]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return sorted(outcomes, key=lambda o: (o.mutant.module, o.mutant.number))


def summary(outcomes: list[Outcome]) -> Iterator[str]:
    by_module: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by_module.setdefault(o.mutant.module, []).append(o)
    total = killed = equivalent = 0
    yield f"{'module':<12} {'mutants':>7} {'killed':>6} {'equiv.':>6} {'survived':>8} {'score':>6}"
    for module, items in sorted(by_module.items()):
        k = sum(o.status != "survived" for o in items)
        e = sum(o.status == "survived" and o.mutant.key in EQUIVALENT for o in items)
        s = len(items) - k - e
        score = 100.0 * k / max(1, len(items) - e)
        yield f"{module:<12} {len(items):>7} {k:>6} {e:>6} {s:>8} {score:>5.1f}%"
        total, killed, equivalent = total + len(items), killed + k, equivalent + e
    score = 100.0 * killed / max(1, total - equivalent)
    raw = 100.0 * killed / max(1, total)
    yield (
        f"{'core':<12} {total:>7} {killed:>6} {equivalent:>6} "
        f"{total - killed - equivalent:>8} {score:>5.1f}%   (killed/all: {raw:.1f}%)"
    )
    semantic = [o for o in outcomes if o.mutant.kind == "semantic"]
    if semantic:
        k = sum(o.status != "survived" for o in semantic)
        e = sum(o.status == "survived" and o.mutant.key in EQUIVALENT for o in semantic)
        yield f"of which semantic: {len(semantic)} mutants, {k} killed, {e} equivalent"
    survivors = [o for o in outcomes if o.status == "survived"]
    by_requirement: dict[str, list[Outcome]] = {}
    for o in survivors:
        if o.mutant.key not in EQUIVALENT:
            for rid in o.mutant.requirements or ("(no requirement cited)",):
                by_requirement.setdefault(rid, []).append(o)
    if by_requirement:
        yield ""
        yield "survivors by requirement:"
        for rid, items in sorted(by_requirement.items()):
            yield f"  {rid}: " + "; ".join(
                f"{o.mutant.module}.py:{o.mutant.line} {o.mutant.where}" for o in items
            )
    if survivors:
        yield ""
        yield "survivors:"
        for o in survivors:
            m = o.mutant
            why = EQUIVALENT.get(m.key)
            tag = f"equivalent: {why}" if why else "NOT KILLED"
            cited = ", ".join(m.requirements) or "no requirement cited"
            yield f"  {m.module}.py:{m.line} in {m.where} ({m.kind}; {cited}): {m.change}"
            yield f"      {tag}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-m", "--module", action="append", choices=sorted(TESTS))
    parser.add_argument("-j", "--jobs", type=int, default=1)
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    parser.add_argument("--only", help="run only mutants whose key contains this text")
    parser.add_argument("--semantic", action="store_true", help="run only the semantic mutants")
    parser.add_argument(
        "--newest", action="store_true", help="the newest modules (PATHS) instead of the core"
    )
    parser.add_argument("--json", type=Path, help="write every mutant's outcome here")
    args = parser.parse_args(argv)
    modules = args.module or sorted(PATHS if args.newest else set(TESTS) - set(PATHS))
    mutants = [m for module in modules for m in enumerate_mutants(module)]
    if args.only:
        mutants = [m for m in mutants if args.only in m.key]
    if args.semantic:
        mutants = [m for m in mutants if m.kind == "semantic"]
    unknown = set(EQUIVALENT) - {m.key for module in TESTS for m in enumerate_mutants(module)}
    if unknown:
        print(f"mutate: EQUIVALENT names mutants that no longer exist: {sorted(unknown)}")
    if args.list:
        for m in mutants:
            cited = ",".join(m.requirements) or "-"
            print(f"{m.module}.py:{m.line} [{m.number}] {m.kind} {cited} {m.where}: {m.change}")
        print(f"{len(mutants)} mutants")
        return 0
    print(f"mutate: {len(mutants)} mutants over {', '.join(modules)}; {args.jobs} job(s)")
    started = time.monotonic()
    done = [0]

    def report(o: Outcome) -> None:
        done[0] += 1
        if o.status == "survived":
            print(
                f"  [{done[0]}/{len(mutants)}] SURVIVED {o.mutant.module}.py:{o.mutant.line} "
                f"{o.mutant.change}",
                flush=True,
            )
        elif done[0] % 25 == 0:
            print(f"  [{done[0]}/{len(mutants)}] {time.monotonic() - started:.0f}s", flush=True)

    outcomes = run(mutants, args.jobs, report)
    print(f"\n{len(outcomes)} mutants in {time.monotonic() - started:.0f}s\n")
    for line in summary(outcomes):
        print(line)
    if args.json:
        rows = [
            {**asdict(o.mutant), "status": o.status, "seconds": o.seconds, "detail": o.detail}
            for o in outcomes
        ]
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    survivors = [o for o in outcomes if o.status == "survived" and o.mutant.key not in EQUIVALENT]
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
