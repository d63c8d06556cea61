"""Every family the summary reads, under every name HAMi and this agent have published.

Facts, read from HAMi's public source and docs (Project-HAMi/HAMi `cmd/scheduler/metrics.go`,
`cmd/vGPUmonitor/metrics.go` and their history; Project-HAMi/website's monitoring pages,
including the HAMi-DRA variant; Project-HAMi/ascend-device-plugin's monitor, which publishes
the same `hami_*` names for NPUs):

- The scheduler (`:9395`, allocation) publishes memory in bytes (MiB x 1024 x 1024), cores on HAMi's
  share scale (100 = a whole card) despite `_ratio` names, quota usage as the quota manager
  keeps it (memory in MiB), and `hami_node_gpu_memory_allocated_ratio` as 0 to 1.
- The vGPU monitor (`:9394`, usage) publishes NVML's card figures and HAMi-core's per-container
  accounting; per-container utilization sums per-process samples and can pass 100.
- Legacy names (`--legacy-metrics`) carry the same figures with the old label names
  (`nodeid`, `deviceuuid`, `deviceidx`, `podnamespace`, `ctrname`, `vdeviceid`, …); older
  releases also used `deviceid`/`gpuid` for the index, `nodename`/`node_name` (and once
  `nmodename`) for the node. AMD core figures are compute units in legacy names and percent in
  the current ones.
- The DRA variant reuses the legacy names with `devicebrand`, `devicename` and
  `deviceproductname` labels and publishes memory in MiB.
- `hami_node_gpu_overview`'s value is the memory allocated, in bytes; its
  `device_memory_limit` label is MiB; its `device_cores` label has meant the allocated cores
  in some releases and the card's total in others, so it is not read.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from devicemanager.model import FIGURES


class Scope(StrEnum):
    DEVICE = "device"
    CONTAINER = "container"
    # One name, two meanings: device-level in early HAMi, per pod in the DRA variant; a
    # series with a pod label is a container's.
    DEVICE_OR_CONTAINER = "device_or_container"
    QUOTA = "quota"


class Unit(StrEnum):
    BYTES = "bytes"
    MIB = "MiB"
    SHARE = "share"  # HAMi's core share, 100 = one whole card
    PERCENT = "percent"  # a measured utilization, 0 to 100 (may pass 100 where summed)
    FRACTION = "fraction"  # 0 to 1
    COUNT = "count"
    SECONDS = "seconds"
    ONE = "one"  # an info family: value 1, facts in labels


class Surface(StrEnum):
    ALLOCATION = "allocation"  # what the scheduler reserved
    USAGE = "usage"  # what was measured
    IDENTITY = "identity"  # names a device or partition; no figure


class Figure(StrEnum):
    # Device level.
    CORES_LIMIT = "cores_limit"
    CORES_ALLOCATED = "cores_allocated"
    MEMORY_LIMIT = "memory_limit_mib"
    MEMORY_ALLOCATED = "memory_allocated_mib"
    SHARED = "shared_containers"
    MEMORY_ALLOCATED_RATIO = "memory_allocated_ratio"
    HOST_CORES = "host_cores_utilization_percent"
    HOST_MEMORY_USED = "host_memory_used_mib"
    HOST_MEMORY_TOTAL = "host_memory_total_mib"
    DEVICE_INFO = "device_info"
    MIG_PLACEMENT = "mig_placement"
    # Container level (cores and memory allocated share the names above).
    MEMORY_USED = "memory_used_mib"
    CORES_USED = "cores_used_percent"
    CORES_USED_OF_LIMIT = "cores_used_percent_of_limit"
    LAST_KERNEL = "last_kernel_seconds"
    MEMORY_CONTEXT = "memory_context_mib"
    MEMORY_MODULE = "memory_module_mib"
    MEMORY_BUFFER = "memory_buffer_mib"
    MIG_INSTANCE = "mig_instance"
    # Quota.
    QUOTA_USED = "quota_used"
    QUOTA_LIMIT = "quota_limit"


@dataclass(frozen=True, slots=True)
class LabelFigure:
    """A figure published as a label value instead of the sample's value."""

    label: str
    figure: Figure
    unit: Unit


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    scope: Scope
    figure: Figure
    unit: Unit
    surface: Surface
    # Precedence among families that publish one figure: the lowest wins, the others are
    # compared against it. 0 current HAMi or this agent, 1 legacy, 2 older, 3 a fallback.
    rank: int
    origin: str
    label_figures: tuple[LabelFigure, ...] = ()


# Label names by meaning, in the order they are tried. A Prometheus server that scraped the
# series renames a clashing label to exported_<name>; that one is the workload's and wins.
LABELS: dict[str, tuple[str, ...]] = {
    # node_name last but one: HAMi used it in one release, and HAMi's dashboard guide has
    # Prometheus add it from the scrape target, where it names the exporter's node.
    "node": ("node", "nodeid", "nodename", "node_name", "nmodename"),
    "uuid": ("device_uuid", "deviceuuid", "id"),
    "index": ("device_index", "deviceidx", "deviceid", "gpuid", "index"),
    "type": ("device_type", "devicetype", "deviceproductname", "name"),
    "namespace": ("namespace", "podnamespace", "quotanamespace"),
    "pod": ("pod", "podname", "pod_name"),
    "container": ("container", "ctrname", "container_name"),
    "container_index": ("container_index", "containeridx"),
    "vdevice_index": ("vdevice_index", "vdeviceid"),
    "quota": ("quota_name", "quotaName"),
    "limit": ("limit",),
    "mig_uuid": ("mig_uuid",),
    "profile": ("profile", "mig_name", "migname"),
    "gpu_instance_id": ("gpu_instance_id", "instance_id", "instanceid"),
    "compute_instance_id": ("compute_instance_id",),
    "mode": ("mode",),
}
# This agent's series name the Instance in instance_name, and the report's rows are Instances.
# Their `pod` (the holder, since issue 31) is not read: a paste from an older agent, or from a
# Prometheus that scraped with honor_labels false, has the scrape target's there (the agent's
# own pod), never the workload.
AGENT_LABELS: dict[str, tuple[str, ...]] = {**LABELS, "pod": ("instance_name",)}
# The scheduler names a container by its slot only; a `container` label on its series is the
# scrape target's (vgpu-scheduler-extender), added by Prometheus.
SCHEDULER_LABELS: dict[str, tuple[str, ...]] = {**LABELS, "container": ()}

SCHED = "HAMi scheduler"
SCHED_LEGACY = "HAMi scheduler, --legacy-metrics"
SCHED_OLD = "HAMi scheduler, early releases"
MON = "HAMi vGPU monitor"
MON_LEGACY = "HAMi vGPU monitor, --legacy-metrics (also volcano-vgpu-device-plugin)"
MON_OLD = "HAMi vGPU monitor, early releases"
DRA = "HAMi-DRA (legacy names, MiB)"
AGENT = "devicemanager"

D, C, DC, Q = Scope.DEVICE, Scope.CONTAINER, Scope.DEVICE_OR_CONTAINER, Scope.QUOTA
A, U, ID = Surface.ALLOCATION, Surface.USAGE, Surface.IDENTITY
BY, MB, SH, PC, FR, N = Unit.BYTES, Unit.MIB, Unit.SHARE, Unit.PERCENT, Unit.FRACTION, Unit.COUNT
F = Figure


def _f(
    name: str,
    scope: Scope,
    figure: Figure,
    unit: Unit,
    surface: Surface,
    rank: int,
    origin: str,
    *label_figures: LabelFigure,
) -> Family:
    return Family(name, scope, figure, unit, surface, rank, origin, label_figures)


_OVERVIEW_LABELS = (
    LabelFigure("device_memory_limit", F.MEMORY_LIMIT, Unit.MIB),
    LabelFigure("devicememorylimit", F.MEMORY_LIMIT, Unit.MIB),
    LabelFigure("shared_containers", F.SHARED, Unit.COUNT),
    LabelFigure("sharedcontainers", F.SHARED, Unit.COUNT),
)
_LEGACY_BREAKDOWN = (
    LabelFigure("context", F.MEMORY_CONTEXT, Unit.BYTES),
    LabelFigure("module", F.MEMORY_MODULE, Unit.BYTES),
    LabelFigure("data", F.MEMORY_BUFFER, Unit.BYTES),
)
_V29_BREAKDOWN = (
    LabelFigure("context_size", F.MEMORY_CONTEXT, Unit.BYTES),
    LabelFigure("module_size", F.MEMORY_MODULE, Unit.BYTES),
    LabelFigure("buffer_size", F.MEMORY_BUFFER, Unit.BYTES),
)

FAMILIES: tuple[Family, ...] = (
    # The scheduler's device families.
    _f("hami_gpu_core_limit_ratio", D, F.CORES_LIMIT, SH, A, 0, SCHED),
    _f("GPUDeviceCoreLimit", D, F.CORES_LIMIT, SH, A, 1, SCHED_LEGACY),
    _f("gpu_device_core_limit", D, F.CORES_LIMIT, SH, A, 2, SCHED_OLD),
    _f("hami_gpu_core_allocated_ratio", D, F.CORES_ALLOCATED, SH, A, 0, SCHED),
    _f("GPUDeviceCoreAllocated", D, F.CORES_ALLOCATED, SH, A, 1, SCHED_LEGACY),
    _f("gpu_device_core_allocated", D, F.CORES_ALLOCATED, SH, A, 2, SCHED_OLD),
    _f("hami_gpu_memory_limit_bytes", D, F.MEMORY_LIMIT, BY, A, 0, SCHED),
    _f("GPUDeviceMemoryLimit", D, F.MEMORY_LIMIT, BY, A, 1, SCHED_LEGACY),
    _f("gpu_device_memory_limit_bytes", D, F.MEMORY_LIMIT, BY, A, 2, SCHED_OLD),
    _f("vGPUDeviceMemoryLimit", D, F.MEMORY_LIMIT, BY, A, 2, SCHED_OLD),
    _f("hami_gpu_memory_allocated_bytes", D, F.MEMORY_ALLOCATED, BY, A, 0, SCHED),
    _f("GPUDeviceMemoryAllocated", D, F.MEMORY_ALLOCATED, BY, A, 1, SCHED_LEGACY),
    _f("gpu_device_memory_allocated_bytes", D, F.MEMORY_ALLOCATED, BY, A, 2, SCHED_OLD),
    _f("hami_gpu_shared_count", D, F.SHARED, N, A, 0, SCHED),
    _f("GPUDeviceSharedNum", D, F.SHARED, N, A, 1, SCHED_LEGACY),
    _f("gpu_device_shared_containers", D, F.SHARED, N, A, 2, SCHED_OLD),
    _f("vGPUDeviceSharedNum", D, F.SHARED, N, A, 2, SCHED_OLD),
    _f("hami_node_gpu_overview", D, F.MEMORY_ALLOCATED, BY, A, 3, SCHED, *_OVERVIEW_LABELS),
    _f("nodeGPUOverview", D, F.MEMORY_ALLOCATED, BY, A, 3, SCHED_LEGACY, *_OVERVIEW_LABELS),
    _f("node_gpu_overview", D, F.MEMORY_ALLOCATED, BY, A, 3, SCHED_OLD, *_OVERVIEW_LABELS),
    _f("hami_node_gpu_memory_allocated_ratio", D, F.MEMORY_ALLOCATED_RATIO, FR, A, 0, SCHED),
    _f("nodeGPUMemoryPercentage", D, F.MEMORY_ALLOCATED_RATIO, FR, A, 1, SCHED_LEGACY),
    _f("node_gpu_memory_percentage", D, F.MEMORY_ALLOCATED_RATIO, FR, A, 2, SCHED_OLD),
    _f("hami_node_gpu_mig_instance_info", D, F.MIG_PLACEMENT, Unit.ONE, ID, 0, SCHED),
    _f("nodeGPUMigInstance", D, F.MIG_PLACEMENT, Unit.ONE, ID, 1, SCHED_LEGACY),
    _f("node_gpu_mig_instance", D, F.MIG_PLACEMENT, Unit.ONE, ID, 2, SCHED_OLD),
    # One name, device-level early, per pod in HAMi-DRA.
    _f("vGPUDeviceCoreAllocated", DC, F.CORES_ALLOCATED, SH, A, 2, DRA),
    _f("vGPUDeviceMemoryAllocated", DC, F.MEMORY_ALLOCATED, BY, A, 2, DRA),
    # The scheduler's per-container families.
    _f("hami_vgpu_core_allocated_ratio", C, F.CORES_ALLOCATED, SH, A, 0, SCHED),
    _f("vGPUCoreAllocated", C, F.CORES_ALLOCATED, SH, A, 1, SCHED_LEGACY),
    _f("vgpu_core_allocated", C, F.CORES_ALLOCATED, SH, A, 2, SCHED_OLD),
    _f("vGPUCorePercentage", C, F.CORES_ALLOCATED, SH, A, 2, SCHED_OLD),
    _f("hami_vgpu_memory_allocated_bytes", C, F.MEMORY_ALLOCATED, BY, A, 0, SCHED),
    _f("vGPUMemoryAllocated", C, F.MEMORY_ALLOCATED, BY, A, 1, SCHED_LEGACY),
    _f("vgpu_memory_allocated_bytes", C, F.MEMORY_ALLOCATED, BY, A, 2, SCHED_OLD),
    _f(
        "vGPUPodsDeviceAllocated",
        C,
        F.MEMORY_ALLOCATED,
        BY,
        A,
        2,
        SCHED_OLD,
        LabelFigure("deviceusedcore", F.CORES_ALLOCATED, SH),
    ),
    # Quotas.
    _f("hami_resource_quota_used", Q, F.QUOTA_USED, N, A, 0, SCHED),
    _f("QuotaUsed", Q, F.QUOTA_USED, N, A, 1, SCHED_LEGACY),
    _f("quota_used", Q, F.QUOTA_USED, N, A, 2, SCHED_OLD),
    _f("hami_resource_quota_limit", Q, F.QUOTA_LIMIT, N, A, 0, SCHED),
    # The monitor's card families.
    _f("hami_host_gpu_utilization_ratio", D, F.HOST_CORES, PC, U, 0, MON),
    _f("HostCoreUtilization", D, F.HOST_CORES, PC, U, 1, MON_LEGACY),
    _f("host_gpu_core_utilization", D, F.HOST_CORES, PC, U, 2, MON_OLD),
    _f("hami_host_gpu_memory_used_bytes", D, F.HOST_MEMORY_USED, BY, U, 0, MON),
    _f("HostGPUMemoryUsage", D, F.HOST_MEMORY_USED, BY, U, 1, MON_LEGACY),
    _f("host_gpu_memory_usage_bytes", D, F.HOST_MEMORY_USED, BY, U, 2, MON_OLD),
    _f("hami_host_gpu_memory_total_bytes", D, F.HOST_MEMORY_TOTAL, BY, U, 0, MON),
    # The monitor's per-container families.
    _f("hami_vgpu_memory_used_bytes", C, F.MEMORY_USED, BY, U, 0, MON),
    _f("vGPU_device_memory_usage_in_bytes", C, F.MEMORY_USED, BY, U, 1, MON_LEGACY),
    _f("vgpu_device_memory_usage_bytes", C, F.MEMORY_USED, BY, U, 2, MON_OLD),
    _f("hami_container_device_memory_bytes", C, F.MEMORY_USED, BY, U, 1, MON, *_V29_BREAKDOWN),
    _f(
        "Device_memory_desc_of_container",
        C,
        F.MEMORY_USED,
        BY,
        U,
        2,
        MON_LEGACY,
        *_LEGACY_BREAKDOWN,
    ),
    _f("hami_vgpu_memory_limit_bytes", C, F.MEMORY_LIMIT, BY, U, 0, MON),
    _f("vGPU_device_memory_limit_in_bytes", C, F.MEMORY_LIMIT, BY, U, 1, MON_LEGACY),
    _f("vgpu_device_memory_limit_bytes", C, F.MEMORY_LIMIT, BY, U, 2, MON_OLD),
    _f("hami_container_device_utilization_ratio", C, F.CORES_USED, PC, U, 0, MON),
    _f("Device_utilization_desc_of_container", C, F.CORES_USED, PC, U, 1, MON_LEGACY),
    _f("container_device_utilization", C, F.CORES_USED, PC, U, 2, MON_OLD),
    _f("vGPU_core_util_of_container", C, F.CORES_USED, PC, U, 2, MON_OLD),
    _f("hami_container_last_kernel_elapsed_seconds", C, F.LAST_KERNEL, Unit.SECONDS, U, 0, MON),
    _f("Device_last_kernel_of_container", C, F.LAST_KERNEL, Unit.SECONDS, U, 1, MON_LEGACY),
    _f("container_device_last_kernel_seconds", C, F.LAST_KERNEL, Unit.SECONDS, U, 2, MON_OLD),
    _f("hami_vgpu_memory_context_bytes", C, F.MEMORY_CONTEXT, BY, U, 0, MON),
    _f("vGPU_device_memory_context_size_bytes", C, F.MEMORY_CONTEXT, BY, U, 2, MON_OLD),
    _f("vgpu_device_memory_context_size_bytes", C, F.MEMORY_CONTEXT, BY, U, 2, MON_OLD),
    _f("hami_vgpu_memory_module_bytes", C, F.MEMORY_MODULE, BY, U, 0, MON),
    _f("vGPU_device_memory_module_size_bytes", C, F.MEMORY_MODULE, BY, U, 2, MON_OLD),
    _f("vgpu_device_memory_module_size_bytes", C, F.MEMORY_MODULE, BY, U, 2, MON_OLD),
    _f("hami_vgpu_memory_buffer_bytes", C, F.MEMORY_BUFFER, BY, U, 0, MON),
    _f("vGPU_device_memory_buffer_size_bytes", C, F.MEMORY_BUFFER, BY, U, 2, MON_OLD),
    _f("vgpu_device_memory_buffer_size_bytes", C, F.MEMORY_BUFFER, BY, U, 2, MON_OLD),
    _f("hami_mig_device_info", C, F.MIG_INSTANCE, Unit.ONE, ID, 0, MON),
    _f("MigInfo", C, F.MIG_INSTANCE, Unit.ONE, ID, 1, MON_LEGACY),
    _f("mig_device_info", C, F.MIG_INSTANCE, Unit.ONE, ID, 2, MON_OLD),
    # This agent's own families (docs/metrics.md).
    _f("gpustack_accelerator_info", D, F.DEVICE_INFO, Unit.ONE, ID, 0, AGENT),
    _f("gpustack_accelerator_memory_total_mib", D, F.MEMORY_LIMIT, MB, U, 0, AGENT),
    _f("gpustack_accelerator_memory_used_mib", D, F.HOST_MEMORY_USED, MB, U, 0, AGENT),
    _f("gpustack_accelerator_cores_utilization_percent", D, F.HOST_CORES, PC, U, 0, AGENT),
    _f("gpustack_instance_accelerator_memory_total_mib", C, F.MEMORY_LIMIT, MB, U, 0, AGENT),
    _f("gpustack_instance_accelerator_memory_used_mib", C, F.MEMORY_USED, MB, U, 0, AGENT),
    _f(
        "gpustack_instance_accelerator_cores_utilization_percent",
        C,
        F.CORES_USED,
        PC,
        U,
        0,
        AGENT,
    ),
)

BY_NAME: dict[str, Family] = {f.name: f for f in FAMILIES}

# The figure table's families (the card's, each per-grant one, the health ones) summarize does
# not read: derived figures, health, temperature and power. A figure added to the table is
# known here without a line of its own.
_AGENT_FIGURES_IGNORED = tuple(name for name in FIGURES.family_names() if name not in BY_NAME)

# Families known and deliberately not summarized: named in the report's `ignored`, never
# counted as unrecognised. Figures derived from others, health, temperature and power, the
# agent's own collector state, the scheduler's own state, and HAMi-WebUI's exporter.
IGNORED: dict[str, str] = {
    name: why
    for names, why in (
        (
            (
                *_AGENT_FIGURES_IGNORED,
                "gpustack_accelerator_unhealthy",
                "gpustack_accelerator_unhealthy_reason",
                "gpustack_accelerator_device_taint_info",
                "gpustack_accelerator_kubelet_health_info",
                "gpustack_accelerator_link_info",
                "gpustack_accelerator_links",
                "gpustack_accelerator_numa_node",
                "gpustack_accelerator_figure_capability",
                "gpustack_accelerator_process_capability",
                "gpustack_accelerator_allocation_errors",
                "gpustack_accelerator_dra_unresolved_devices",
                "gpustack_accelerator_backend_up",
                "gpustack_accelerator_backend_read_duration_seconds",
                "gpustack_instance_metrics_collector_success",
                "gpustack_instance_metrics_collector_duration_seconds",
                "gpustack_instance_metrics_exporter",
                "gpustack_device_manager_build_info",
                "gpustack_device_manager_http_requests_total",
                "gpustack_device_manager_http_refused_total",
                "gpustack_device_manager_rounds_total",
                "gpustack_device_manager_rounds_failed_total",
                "gpustack_accelerator_pod_errors",
                "gpustack_accelerator_grants_refused",
                "gpustack_instance_metrics_collector_skipped_lines",
                "gpustack_instance_metrics_collector_age_seconds",
                "gpustack_instance_accelerator_unhealthy",
                "gpustack_instance_cpu_total_millicores",
                "gpustack_instance_cpu_used_millicores",
                "gpustack_instance_memory_total_mib",
                "gpustack_instance_memory_used_mib",
                "gpustack_instance_storage_total_mib",
                "gpustack_instance_storage_used_mib",
            ),
            "devicemanager: derived, health, power, topology or collector state",
        ),
        (
            (
                "hami_build_info",
                "hami_scheduler_is_leader",
                "hami_scheduler_cache_synced",
                "hami_gpu_device_health",
                "hami_host_gpu_memory_controller_utilization_ratio",
                "hami_host_gpu_memory_utilization_ratio",
                "hami_host_gpu_temperature_celsius",
                "hami_host_gpu_power_usage_watts",
                "hami_host_gpu_power_usage_milliwatts",
                "hami_host_gpu_power_limit_milliwatts",
                "hami_host_gpu_ecc_errors_total",
                "hami_container_device_process_count",
                "hami_container_oom_kill_status",
                "Container_oom_kill_status",
                "vGPUMemoryPercentage",
            ),
            "HAMi: build, scheduler state, health, power, or a percentage derived from others",
        ),
        (
            (
                "hami_vcore_scaling",
                "hami_vmemory_scaling",
                "hami_vgpu_count",
                "hami_vmemory_size",
                "hami_vcore_size",
                "hami_memory_used",
                "hami_memory_size",
                "hami_memory_util",
                "hami_core_size",
                "hami_core_used",
                "hami_core_util",
                "hami_core_used_avg",
                "hami_core_util_avg",
                "hami_device_temperature",
                "hami_device_memory_temperature",
                "hami_device_power",
                "hami_device_hardware_health",
                "hami_device_fan_speed_p",
                "hami_device_fan_speed_r",
                "hami_container_vgpu_allocated",
                "hami_container_vmemory_allocated",
                "hami_container_vcore_allocated",
                "hami_container_memory_used",
                "hami_container_memory_util",
                "hami_container_core_used",
                "hami_container_core_util",
                "hami_pool_vgpu_count",
                "hami_pool_vmemory_size",
                "hami_pool_vcore_size",
                "hami_system_component_health",
            ),
            "HAMi-WebUI's exporter (a re-aggregation of the families above)",
        ),
        (
            (
                "namespace:gpustack_accelerator_held:count",
                "namespace:gpustack_accelerator_memory_total_mib:sum",
                "namespace:gpustack_accelerator_memory_used_mib:sum",
                "namespace:gpustack_accelerator_compute_used:sum",
            ),
            "devicemanager's recording rules: per namespace, summed from the per-grant families",
        ),
    )
    for name in names
}
# A process's or client library's own families, whoever serves them.
IGNORED_PREFIXES: tuple[str, ...] = ("go_", "process_", "promhttp_", "python_", "scrape_")

# Families that, if present, make the report's basis include measured usage.
USAGE_FIGURES = frozenset(
    {F.HOST_CORES, F.HOST_MEMORY_USED, F.MEMORY_USED, F.CORES_USED, F.CORES_USED_OF_LIMIT}
)

# Families a scheduler publishes for every device of one naming generation: a text holding
# some of a generation's but not others was cut off (or filtered) on the way.
DEVICE_SETS: tuple[tuple[str, ...], ...] = (
    (
        "hami_gpu_memory_limit_bytes",
        "hami_gpu_core_limit_ratio",
        "hami_gpu_memory_allocated_bytes",
        "hami_gpu_core_allocated_ratio",
        "hami_gpu_shared_count",
    ),
    (
        "GPUDeviceMemoryLimit",
        "GPUDeviceCoreLimit",
        "GPUDeviceMemoryAllocated",
        "GPUDeviceCoreAllocated",
        "GPUDeviceSharedNum",
    ),
    ("hami_host_gpu_utilization_ratio", "hami_host_gpu_memory_used_bytes"),
    ("HostCoreUtilization", "HostGPUMemoryUsage"),
)


def ignored_reason(name: str) -> str | None:
    if name in IGNORED:
        return IGNORED[name]
    if name.startswith(IGNORED_PREFIXES):
        return "a process's or client library's own family"
    return None


def labels_for(family: Family) -> dict[str, tuple[str, ...]]:
    if family.origin == AGENT:
        return AGENT_LABELS
    if family.surface is Surface.ALLOCATION:
        return SCHEDULER_LABELS
    return LABELS
