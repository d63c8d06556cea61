/*
 * A fake libamd_smi.so for tests: the AMD SMI entry points the agent reaches through the real
 * `amdsmi` wheel, with our own declarations (amdsmi_decl.h, written from the public amdsmi.h).
 * The wheel binds every symbol it knows at import, so the kit compiles this file together with
 * stubs generated at test time from the wheel's own list (each answers NOT_SUPPORTED); see
 * tests/fakelib/amd/__init__.py. Driven by the fake-library kit (tests/fakelib/fakelib.h):
 * what it answers comes from the scenario named by $FAKE_AMDSMI_SCENARIO, read at amdsmi_init.
 *
 * Behaviours it reproduces (facts: the project's reference notes on AMD, §3, §12):
 *   - sockets are physical cards; each XCP of a partitioned card is a processor handle of its
 *     socket with its own UUID, BDF function and KFD partition id;
 *   - "not available" as the wheel sees it: 0xFFFF activity and power, 0xFFFFFFFF cu_occupancy,
 *     NOT_SUPPORTED temperature on a secondary XCP;
 *   - the process list protocol: *max 0 asks the count; a buffer too small is filled and the call
 *     answers OUT_OF_RESOURCES with the real count; engine time in cumulative ns that advances
 *     by `gfx_step` at each list call on that device;
 *   - the ROCm 7.2.0 defect (`process_list_ignores_handle`): every process under every device;
 *   - a device lost mid-read (the kit's lost / lost_after): every call answers NOT_FOUND;
 *     with lost_within, right after it answered its UUID, so the rest of that read fails.
 *
 * Scenario (JSON; see tests/fakelib/amd/__init__.py): lib_version{major, minor, release, build},
 * driver, process_list_ignores_handle, call_log, and devices[] of {socket, uuid, domain, bus,
 * device, function, partition, compute_partition, market_name, serial, cus, render, card, node,
 * vram{total, used} (MiB), activity{gfx, umc, mm}, power{socket, current, average, limit},
 * temp{hotspot, edge}, ecc{correctable, uncorrectable, deferred}, ecc_enabled (block bits),
 * ecc_blocks{<NAME>: {correctable, uncorrectable, deferred}}, ecc_block_faults{<NAME>: code},
 * bad_pages[]{address, size, status}, violation{prochot, ppt, socket, vr, hbm, gfx_clk},
 * processes[]{pid, name, vram, gtt, cpu,
 * gfx, gfx_step, enc, cu}, xcc_busy[] (its XCCs' GFX busy % in the GPU metrics table),
 * metrics_revision (that table's content revision), numa (the NUMA node; absent: NOT_SUPPORTED), links{<other device's
 * position>: {type (1 PCIe, 2 xGMI), hops}} (looked up both ways; a pair in neither
 * answers NOT_SUPPORTED)} plus the kit's fault keys.
 */
#include "fakelib.h"
#include "amdsmi_decl.h"

#define D "devices.%d."
#define MAX_SOCKETS FL_MAX_DEVICES
#define NA16 0xFFFFu

typedef struct {
    int dev;
} fake_processor_t;

typedef struct {
    int socket; /* the scenario's socket number */
} fake_socket_t;

static fake_processor_t processors[FL_MAX_DEVICES];
static fake_socket_t sockets[MAX_SOCKETS];
static int list_calls[FL_MAX_DEVICES];
static int initialised;
static char build[64];

static void log_call(const char *name) {
    const char *path = fl_get("call_log");
    FILE *f;
    if (!path || !(f = fopen(path, "a")))
        return;
    fprintf(f, "%s\n", name);
    fclose(f);
}

/* The device behind a processor handle, or -1 with *rc set to what the call must answer. */
static int device_of(amdsmi_processor_handle h, const char *entry, amdsmi_status_t *rc) {
    fake_processor_t *p = (fake_processor_t *)h;
    int code;
    fl_hang(entry);
    if (!initialised) {
        *rc = AMDSMI_STATUS_NOT_INIT;
        return -1;
    }
    if (!p || p < processors || p >= processors + FL_MAX_DEVICES || p->dev >= fl_count("devices")) {
        *rc = AMDSMI_STATUS_INVAL;
        return -1;
    }
    if (fl_lost(p->dev)) {
        *rc = AMDSMI_STATUS_NOT_FOUND;
        return -1;
    }
    code = fl_fault(entry, p->dev);
    *rc = code ? (amdsmi_status_t)code : AMDSMI_STATUS_SUCCESS;
    return code ? -1 : p->dev;
}

#define DEVICE(entry)                                                                             \
    amdsmi_status_t rc;                                                                           \
    int d = device_of(h, entry, &rc);                                                             \
    if (d < 0)                                                                                    \
        return rc;

static void copy(char *out, size_t size, const char *value) {
    snprintf(out, size, "%s", value ? value : "");
}

amdsmi_status_t amdsmi_init(uint64_t init_flags) {
    int code;
    (void)init_flags;
    if (fl_load() != 0)
        return AMDSMI_STATUS_DRIVER_NOT_LOADED;
    log_call("amdsmi_init");
    if ((code = (int)fl_int(0, "init")) != 0)
        return (amdsmi_status_t)code;
    for (int i = 0; i < FL_MAX_DEVICES; i++) {
        processors[i].dev = i;
        list_calls[i] = 0;
    }
    initialised = 1;
    return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_shut_down(void) {
    if (!initialised)
        return AMDSMI_STATUS_NOT_INIT;
    initialised = 0;
    return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_lib_version(amdsmi_version_t *version) {
    if (!version)
        return AMDSMI_STATUS_INVAL;
    version->major = (uint32_t)fl_int(26, "lib_version.major");
    version->minor = (uint32_t)fl_int(0, "lib_version.minor");
    version->release = (uint32_t)fl_int(2, "lib_version.release");
    copy(build, sizeof build, fl_str("26.0.2", "lib_version.build"));
    version->build = build;
    return AMDSMI_STATUS_SUCCESS;
}

/* The present devices' distinct socket numbers, in order of first appearance. */
static int socket_numbers(int *out) {
    int present[FL_MAX_DEVICES], n = fl_present_devices(present, FL_MAX_DEVICES), count = 0;
    for (int i = 0; i < n; i++) {
        int s = (int)fl_int(present[i], D "socket", present[i]), seen = 0;
        for (int j = 0; j < count; j++)
            seen |= out[j] == s;
        if (!seen && count < MAX_SOCKETS)
            out[count++] = s;
    }
    return count;
}

amdsmi_status_t amdsmi_get_socket_handles(uint32_t *count, amdsmi_socket_handle *handles) {
    int numbers[MAX_SOCKETS], n;
    fl_hang("amdsmi_get_socket_handles");
    if (!initialised)
        return AMDSMI_STATUS_NOT_INIT;
    if (!count)
        return AMDSMI_STATUS_INVAL;
    if (!handles)
        fl_enumerate(); /* one enumeration per probe: what `gone_after` counts */
    n = socket_numbers(numbers);
    if (!handles) {
        *count = (uint32_t)n;
        return AMDSMI_STATUS_SUCCESS;
    }
    if (*count < (uint32_t)n)
        return AMDSMI_STATUS_INSUFFICIENT_SIZE;
    for (int i = 0; i < n; i++) {
        sockets[i].socket = numbers[i];
        handles[i] = &sockets[i];
    }
    *count = (uint32_t)n;
    return AMDSMI_STATUS_SUCCESS;
}

/* The present devices of one socket, in order. */
static int devices_of(const fake_socket_t *socket, int *out) {
    int present[FL_MAX_DEVICES], n = fl_present_devices(present, FL_MAX_DEVICES), count = 0;
    for (int i = 0; i < n; i++)
        if ((int)fl_int(present[i], D "socket", present[i]) == socket->socket)
            out[count++] = present[i];
    return count;
}

static int valid_socket(amdsmi_socket_handle handle) {
    fake_socket_t *s = (fake_socket_t *)handle;
    return s && s >= sockets && s < sockets + MAX_SOCKETS;
}

amdsmi_status_t amdsmi_get_processor_handles(amdsmi_socket_handle socket, uint32_t *count,
                                             amdsmi_processor_handle *handles) {
    int devs[FL_MAX_DEVICES], n;
    if (!initialised)
        return AMDSMI_STATUS_NOT_INIT;
    if (!count || !valid_socket(socket))
        return AMDSMI_STATUS_INVAL;
    n = devices_of((fake_socket_t *)socket, devs);
    if (!handles) {
        *count = (uint32_t)n;
        return AMDSMI_STATUS_SUCCESS;
    }
    if (*count < (uint32_t)n)
        return AMDSMI_STATUS_INSUFFICIENT_SIZE;
    for (int i = 0; i < n; i++)
        handles[i] = &processors[devs[i]];
    *count = (uint32_t)n;
    return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_socket_info(amdsmi_socket_handle socket, size_t len, char *name) {
    int devs[FL_MAX_DEVICES];
    if (!initialised)
        return AMDSMI_STATUS_NOT_INIT;
    if (!name || !valid_socket(socket) || devices_of((fake_socket_t *)socket, devs) == 0)
        return AMDSMI_STATUS_INVAL;
    /* amdsmi names a socket by the BDF its XCPs share, without the function. */
    snprintf(name, len, "%04llx:%02llx:%02llx", fl_u64(0, D "domain", devs[0]),
             fl_u64(0, D "bus", devs[0]), fl_u64(0, D "device", devs[0]));
    return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_device_uuid(amdsmi_processor_handle h, uint32_t *len, char *uuid) {
    const char *value;
    fake_processor_t *p = (fake_processor_t *)h;
    if (initialised && p >= processors && p < processors + FL_MAX_DEVICES)
        fl_identity_read(p->dev); /* a device that falls off after `lost_after` of these */
    DEVICE("amdsmi_get_gpu_device_uuid");
    value = fl_str("", D "uuid", d);
    if (!len || !uuid)
        return AMDSMI_STATUS_INVAL;
    if (strlen(value) + 1 > *len)
        return AMDSMI_STATUS_INSUFFICIENT_SIZE;
    strcpy(uuid, value);
    *len = (uint32_t)strlen(value);
    fl_identity_answered(d); /* `lost_within`: every later call answers NOT_FOUND */
    return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_device_bdf(amdsmi_processor_handle h, amdsmi_bdf_t *bdf) {
    DEVICE("amdsmi_get_gpu_device_bdf");
    bdf->as_uint = 0;
    bdf->fields.domain_number = fl_u64(0, D "domain", d);
    bdf->fields.bus_number = fl_u64(0, D "bus", d);
    bdf->fields.device_number = fl_u64(0, D "device", d);
    bdf->fields.function_number = fl_u64(0, D "function", d);
    return AMDSMI_STATUS_SUCCESS;
}

/* The KFD's BDFID: domain above bit 32, the partition in bits 31:28, then bus, device, function.
 * fake_rocm_smi.c answers rsmi_dev_pci_id_get with the same value for the same device. */
amdsmi_status_t amdsmi_get_gpu_bdf_id(amdsmi_processor_handle h, uint64_t *bdfid) {
    DEVICE("amdsmi_get_gpu_bdf_id");
    *bdfid = (fl_u64(0, D "domain", d) << 32) | ((fl_u64(0, D "partition", d) & 0xF) << 28) |
             (fl_u64(0, D "bus", d) << 8) | (fl_u64(0, D "device", d) << 3) |
             fl_u64(0, D "function", d);
    return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_asic_info(amdsmi_processor_handle h, amdsmi_asic_info_t *info) {
    DEVICE("amdsmi_get_gpu_asic_info");
    memset(info, 0, sizeof *info);
    copy(info->market_name, sizeof info->market_name, fl_str("AMD Instinct MI300X", D "market_name", d));
    info->vendor_id = 0x1002;
    copy(info->vendor_name, sizeof info->vendor_name, "Advanced Micro Devices Inc. [AMD/ATI]");
    info->subvendor_id = 0x1002;
    info->device_id = 0x74a1;
    info->rev_id = 0;
    copy(info->asic_serial, sizeof info->asic_serial, fl_str("", D "serial", d));
    info->oam_id = (uint32_t)fl_int(0, D "socket", d);
    info->num_of_compute_units = (uint32_t)fl_int(304, D "cus", d);
    info->target_graphics_version = 0x942;
    info->subsystem_id = 0x74a1;
    return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_kfd_info(amdsmi_processor_handle h, amdsmi_kfd_info_t *info) {
    DEVICE("amdsmi_get_gpu_kfd_info");
    memset(info, 0, sizeof *info);
    info->kfd_id = fl_u64(0, D "kfd_id", d);
    info->node_id = (uint32_t)fl_int(d + 2, D "node", d);
    info->current_partition_id = (uint32_t)fl_int(0, D "partition", d);
    return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_enumeration_info(amdsmi_processor_handle h,
                                                amdsmi_enumeration_info_t *info) {
    DEVICE("amdsmi_get_gpu_enumeration_info");
    memset(info, 0, sizeof *info);
    info->drm_render = (uint32_t)fl_int(128 + d, D "render", d);
    info->drm_card = (uint32_t)fl_int(d, D "card", d);
    info->hsa_id = (uint32_t)fl_int(d + 1, D "node", d);
    info->hip_id = (uint32_t)d;
    copy(info->hip_uuid, sizeof info->hip_uuid, fl_str("", D "uuid", d));
    return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_compute_partition(amdsmi_processor_handle h, char *partition,
                                                 uint32_t len) {
    DEVICE("amdsmi_get_gpu_compute_partition");
    if (!partition)
        return AMDSMI_STATUS_INVAL;
    snprintf(partition, len, "%s", fl_str("SPX", D "compute_partition", d));
    return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_vram_usage(amdsmi_processor_handle h, amdsmi_vram_usage_t *usage) {
    DEVICE("amdsmi_get_gpu_vram_usage");
    memset(usage, 0, sizeof *usage);
    usage->vram_total = (uint32_t)fl_int(196288, D "vram.total", d);
    usage->vram_used = (uint32_t)fl_int(0, D "vram.used", d);
    return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_activity(amdsmi_processor_handle h, amdsmi_engine_usage_t *usage) {
    DEVICE("amdsmi_get_gpu_activity");
    memset(usage, 0, sizeof *usage);
    usage->gfx_activity = (uint32_t)fl_int(NA16, D "activity.gfx", d);
    usage->umc_activity = (uint32_t)fl_int(NA16, D "activity.umc", d);
    usage->mm_activity = (uint32_t)fl_int(NA16, D "activity.mm", d);
    return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_power_info(amdsmi_processor_handle h, amdsmi_power_info_t *info) {
    DEVICE("amdsmi_get_power_info");
    memset(info, 0, sizeof *info);
    info->socket_power = fl_u64(NA16, D "power.socket", d);
    info->current_socket_power = (uint32_t)fl_int(NA16, D "power.current", d);
    info->average_socket_power = (uint32_t)fl_int(NA16, D "power.average", d);
    info->power_limit = (uint32_t)fl_int(750, D "power.limit", d);
    return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_temp_metric(amdsmi_processor_handle h, uint32_t sensor, uint32_t metric,
                                       int64_t *temperature) {
    const char *value;
    DEVICE("amdsmi_get_temp_metric");
    if (metric != AMDSMI_TEMP_CURRENT || !temperature)
        return AMDSMI_STATUS_INVAL;
    if (sensor == AMDSMI_TEMPERATURE_TYPE_HOTSPOT)
        value = fl_get(D "temp.hotspot", d);
    else if (sensor == AMDSMI_TEMPERATURE_TYPE_EDGE)
        value = fl_get(D "temp.edge", d);
    else
        value = NULL;
    if (!value)
        return AMDSMI_STATUS_NOT_SUPPORTED; /* no such sensor, or a secondary XCP */
    *temperature = strtoll(value, NULL, 10);
    return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_driver_info(amdsmi_processor_handle h, amdsmi_driver_info_t *info) {
    DEVICE("amdsmi_get_gpu_driver_info");
    memset(info, 0, sizeof *info);
    copy(info->driver_version, sizeof info->driver_version, fl_str("6.12.12", "driver"));
    copy(info->driver_date, sizeof info->driver_date, "2015/01/01 00:00");
    copy(info->driver_name, sizeof info->driver_name, "amdgpu");
    return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_total_ecc_count(amdsmi_processor_handle h,
                                               amdsmi_error_count_t *count) {
    DEVICE("amdsmi_get_gpu_total_ecc_count");
    memset(count, 0, sizeof *count);
    count->correctable_count = fl_u64(0, D "ecc.correctable", d);
    count->uncorrectable_count = fl_u64(0, D "ecc.uncorrectable", d);
    count->deferred_count = fl_u64(0, D "ecc.deferred", d);
    return AMDSMI_STATUS_SUCCESS;
}

/* -- ECC per block, bad pages and throttling (issue 29) --------------------------------------- */

static const char *const block_names[AMDSMI_GPU_BLOCK_COUNT] = {
    "UMC", "SDMA", "GFX", "MMHUB", "ATHUB", "PCIE_BIF", "HDP", "XGMI_WAFL", "DF", "SMN",
    "SEM", "MP0", "MP1", "FUSE", "MCA", "VCN", "JPEG", "IH", "MPIO"};

/* The blocks with ECC enabled: `ecc_enabled` (default UMC, SDMA, GFX, MMHUB and XGMI_WAFL). */
amdsmi_status_t amdsmi_get_gpu_ecc_enabled(amdsmi_processor_handle h, uint64_t *enabled_blocks) {
    DEVICE("amdsmi_get_gpu_ecc_enabled");
    if (!enabled_blocks)
        return AMDSMI_STATUS_INVAL;
    *enabled_blocks = fl_u64(0x8F, D "ecc_enabled", d);
    return AMDSMI_STATUS_SUCCESS;
}

/* One block's counts: `ecc_blocks.<NAME>.{correctable, uncorrectable, deferred}`; without them
 * the UMC (the memory) answers the card's total (`ecc.*`) and every other block 0, so the
 * blocks add up to the total. `ecc_block_faults.<NAME>` answers that code instead. */
amdsmi_status_t amdsmi_get_gpu_ecc_count(amdsmi_processor_handle h, amdsmi_gpu_block_t block,
                                         amdsmi_error_count_t *ec) {
    const char *name = NULL, *fault;
    int umc;
    DEVICE("amdsmi_get_gpu_ecc_count");
    if (!ec)
        return AMDSMI_STATUS_INVAL;
    for (int bit = 0; bit < AMDSMI_GPU_BLOCK_COUNT; bit++)
        if (block == (1ull << bit))
            name = block_names[bit];
    if (!name)
        return AMDSMI_STATUS_INVAL;
    if ((fault = fl_get(D "ecc_block_faults.%s", d, name)) != NULL)
        return (amdsmi_status_t)atoi(fault);
    umc = block == 1ull;
    memset(ec, 0, sizeof *ec);
    ec->correctable_count = fl_u64(umc ? fl_u64(0, D "ecc.correctable", d) : 0,
                                   D "ecc_blocks.%s.correctable", d, name);
    ec->uncorrectable_count = fl_u64(umc ? fl_u64(0, D "ecc.uncorrectable", d) : 0,
                                     D "ecc_blocks.%s.uncorrectable", d, name);
    ec->deferred_count =
        fl_u64(umc ? fl_u64(0, D "ecc.deferred", d) : 0, D "ecc_blocks.%s.deferred", d, name);
    return AMDSMI_STATUS_SUCCESS;
}

/* `bad_pages[]{address, size, status}` (none by default). A NULL buffer asks the count; a buffer
 * of *num_pages records is filled with as many as fit and *num_pages says how many there are. */
amdsmi_status_t amdsmi_get_gpu_bad_page_info(amdsmi_processor_handle h, uint32_t *num_pages,
                                             amdsmi_retired_page_record_t *info) {
    int count;
    DEVICE("amdsmi_get_gpu_bad_page_info");
    if (!num_pages)
        return AMDSMI_STATUS_INVAL;
    count = fl_count(D "bad_pages", d);
    if (info) {
        for (int i = 0; i < count && (uint32_t)i < *num_pages; i++) {
            info[i].page_address = fl_u64(0, D "bad_pages.%d.address", d, i);
            info[i].page_size = fl_u64(4096, D "bad_pages.%d.size", d, i);
            info[i].status = (uint32_t)fl_u64(0, D "bad_pages.%d.status", d, i);
        }
    }
    *num_pages = (uint32_t)count;
    return AMDSMI_STATUS_SUCCESS;
}

/* `violation{prochot, ppt, socket, vr, hbm, gfx_clk}`: each flag 1 active, 0 not (the default),
 * 255 (UINT8_MAX) unsupported; the percents follow (100 active, 0 not, UINT64_MAX unsupported).
 * The library samples the card's metrics twice, 100 ms apart; the fake answers at once. */
amdsmi_status_t amdsmi_get_violation_status(amdsmi_processor_handle h,
                                            amdsmi_violation_status_t *info) {
    static const char *const flags[] = {"prochot", "ppt", "socket", "vr", "hbm", "gfx_clk"};
    uint8_t *active;
    uint64_t *percent;
    DEVICE("amdsmi_get_violation_status");
    if (!info)
        return AMDSMI_STATUS_INVAL;
    memset(info, 0, sizeof *info);
    active = &info->active_prochot_thrm;
    percent = &info->per_prochot_thrm;
    for (int i = 0; i < 6; i++) {
        uint8_t flag = (uint8_t)fl_u64(0, D "violation.%s", d, flags[i]);
        active[i] = flag;
        percent[i] = flag == 0xFFu ? UINT64_MAX : flag ? 100u : 0u;
    }
    info->reference_timestamp = fl_u64(0, D "violation.timestamp", d);
    return AMDSMI_STATUS_SUCCESS;
}

/* -- the card's energy, clocks and PCIe replays (issue 29) ------------------------------------ */

amdsmi_status_t amdsmi_get_energy_count(amdsmi_processor_handle h, uint64_t *energy_accumulator,
                                        float *counter_resolution, uint64_t *timestamp) {
    DEVICE("amdsmi_get_energy_count");
    if (!energy_accumulator || !counter_resolution || !timestamp)
        return AMDSMI_STATUS_INVAL;
    *energy_accumulator = fl_u64(0, D "energy.accumulator", d);
    *counter_resolution = (float)fl_double(15.3f, D "energy.resolution", d); /* µJ per count */
    *timestamp = fl_u64(0, D "energy.timestamp", d);
    return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_clock_info(amdsmi_processor_handle h, uint32_t clk_type,
                                      amdsmi_clk_info_t *info) {
    const char *name = clk_type == AMDSMI_CLK_TYPE_GFX   ? "gfx"
                       : clk_type == AMDSMI_CLK_TYPE_MEM ? "mem"
                                                         : NULL;
    const char *fault;
    DEVICE("amdsmi_get_clock_info");
    if (!info)
        return AMDSMI_STATUS_INVAL;
    if (!name)
        return AMDSMI_STATUS_NOT_SUPPORTED; /* a domain the fake does not model */
    if ((fault = fl_get(D "clock_faults.%s", d, name)) != NULL)
        return (amdsmi_status_t)atoi(fault);
    memset(info, 0, sizeof *info);
    info->clk = (uint32_t)fl_u64(clk_type == AMDSMI_CLK_TYPE_GFX ? 2100 : 1300, D "clocks.%s", d,
                                 name); /* MHz, an MI300X's peak */
    info->max_clk = info->clk;
    return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_pci_replay_counter(amdsmi_processor_handle h, uint64_t *counter) {
    DEVICE("amdsmi_get_gpu_pci_replay_counter");
    if (!counter)
        return AMDSMI_STATUS_INVAL;
    *counter = fl_u64(0, D "pcie_replays", d);
    return AMDSMI_STATUS_SUCCESS;
}

/* -- the GPU metrics table (issue 41) ------------------------------------------------------ */

/* The card's GPU metrics table as the library answers it on processor `h`: the averages are the
 * handle's `activity.{gfx, umc, mm}` (amdsmi_get_gpu_activity copies them from this table), and
 * `xcp_stats[k].gfx_busy_inst` is the `xcc_busy[]` list (each XCC's instantaneous GFX busy %) of
 * the processor of its socket whose KFD partition id is k; `num_partition` counts the socket's
 * processors. What the firmware does not fill is the type's maximum, as smu_cmn_init_soft_gpu_
 * metrics leaves it: every XCC slot beyond a partition's own, and every xcp_stats entry where
 * `metrics_revision` (the table's content revision, default 8) is below 6, before the per-XCP
 * stats existed. `faults.amdsmi_get_gpu_metrics_info` answers a code instead (NOT_SUPPORTED:
 * a card with no table). */
amdsmi_status_t amdsmi_get_gpu_metrics_info(amdsmi_processor_handle h,
                                            amdsmi_gpu_metrics_t *metrics) {
    int present[FL_MAX_DEVICES], n, siblings = 0;
    uint8_t revision;
    DEVICE("amdsmi_get_gpu_metrics_info");
    if (!metrics)
        return AMDSMI_STATUS_INVAL;
    memset(metrics, 0xFF, sizeof *metrics);
    revision = (uint8_t)fl_int(8, D "metrics_revision", d);
    metrics->common_header.structure_size = (uint16_t)sizeof *metrics;
    metrics->common_header.format_revision = 1;
    metrics->common_header.content_revision = revision;
    metrics->average_gfx_activity = (uint16_t)fl_int(NA16, D "activity.gfx", d);
    metrics->average_umc_activity = (uint16_t)fl_int(NA16, D "activity.umc", d);
    metrics->average_mm_activity = (uint16_t)fl_int(NA16, D "activity.mm", d);
    n = fl_present_devices(present, FL_MAX_DEVICES);
    for (int i = 0; i < n; i++) {
        int s = present[i], k;
        if (fl_int(s, D "socket", s) != fl_int(d, D "socket", d))
            continue;
        siblings++;
        k = (int)fl_int(0, D "partition", s);
        if (revision < 6 || k < 0 || k >= AMDSMI_MAX_NUM_XCP)
            continue;
        for (int j = 0; j < fl_count(D "xcc_busy", s) && j < AMDSMI_MAX_NUM_XCC; j++)
            metrics->xcp_stats[k].gfx_busy_inst[j] =
                (uint32_t)fl_u64(0xFFFFFFFFu, D "xcc_busy.%d", s, j);
    }
    metrics->num_partition = revision < 6 ? 0xFFFFu : (uint16_t)siblings;
    return AMDSMI_STATUS_SUCCESS;
}

/* -- links and placement (R-X3) -------------------------------------------------------------- */

amdsmi_status_t amdsmi_topo_get_numa_node_number(amdsmi_processor_handle h, uint32_t *numa_node) {
    DEVICE("amdsmi_topo_get_numa_node_number");
    if (!numa_node)
        return AMDSMI_STATUS_INVAL;
    if (!fl_get(D "numa", d))
        return AMDSMI_STATUS_NOT_SUPPORTED;
    *numa_node = (uint32_t)fl_int(0, D "numa", d);
    return AMDSMI_STATUS_SUCCESS;
}

/* The scenario's record of the link between devices a and b, looked up both ways: the key of
 * `field` under it, or NULL. */
static const char *link_field(int a, int b, const char *field) {
    const char *value = fl_get("devices.%d.links.%d.%s", a, b, field);
    return value ? value : fl_get("devices.%d.links.%d.%s", b, a, field);
}

static amdsmi_status_t pair(amdsmi_processor_handle src, amdsmi_processor_handle dst,
                            const char *entry, int *a, int *b) {
    amdsmi_status_t rc;
    if ((*a = device_of(src, entry, &rc)) < 0 || (*b = device_of(dst, entry, &rc)) < 0)
        return rc;
    return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_topo_get_link_type(amdsmi_processor_handle src, amdsmi_processor_handle dst,
                                          uint64_t *hops, uint32_t *type) {
    int a = -1, b = -1;
    const char *kind;
    amdsmi_status_t rc = pair(src, dst, "amdsmi_topo_get_link_type", &a, &b);
    if (rc != AMDSMI_STATUS_SUCCESS)
        return rc;
    if (!hops || !type)
        return AMDSMI_STATUS_INVAL;
    if (!(kind = link_field(a, b, "type")))
        return AMDSMI_STATUS_NOT_SUPPORTED;
    *type = (uint32_t)atoi(kind);
    *hops = link_field(a, b, "hops") ? (uint64_t)atoll(link_field(a, b, "hops")) : 1u;
    return AMDSMI_STATUS_SUCCESS;
}

/* Row k of the processes `device` answers for device `d`: its own, or (the ROCm 7.2.0 defect)
 * every device's in turn. Returns the owning device and the row's position there, or -1. */
static int nth_process(int d, int k, int *row) {
    int total = fl_count("devices");
    if (!fl_int(0, "process_list_ignores_handle")) {
        *row = k;
        return k < fl_count(D "processes", d) ? d : -1;
    }
    for (int owner = 0; owner < total; owner++) {
        int n = fl_count(D "processes", owner);
        if (k < n) {
            *row = k;
            return owner;
        }
        k -= n;
    }
    return -1;
}

static int listed_processes(int d) {
    int n = 0, row;
    while (nth_process(d, n, &row) >= 0)
        n++;
    return n;
}

static void fill_row(amdsmi_proc_info_t *out, int owner, int row, int calls) {
    memset(out, 0, sizeof *out);
    copy(out->name, sizeof out->name, fl_str("python3", D "processes.%d.name", owner, row));
    out->pid = (uint32_t)fl_int(0, D "processes.%d.pid", owner, row);
    out->memory_usage.vram_mem = fl_u64(0, D "processes.%d.vram", owner, row);
    out->memory_usage.gtt_mem = fl_u64(2097152, D "processes.%d.gtt", owner, row);
    out->memory_usage.cpu_mem = fl_u64(0, D "processes.%d.cpu", owner, row);
    out->mem = out->memory_usage.vram_mem + out->memory_usage.gtt_mem + out->memory_usage.cpu_mem;
    out->engine_usage.gfx = fl_u64(0, D "processes.%d.gfx", owner, row) +
                            fl_u64(0, D "processes.%d.gfx_step", owner, row) * (uint64_t)calls;
    out->engine_usage.enc = fl_u64(0, D "processes.%d.enc", owner, row);
    out->cu_occupancy = (uint32_t)fl_u64(0xFFFFFFFFu, D "processes.%d.cu", owner, row);
}

amdsmi_status_t amdsmi_get_gpu_process_list(amdsmi_processor_handle h, uint32_t *max_processes,
                                            amdsmi_proc_info_t *list) {
    int listed, extra, total, calls;
    DEVICE("amdsmi_get_gpu_process_list");
    if (!max_processes)
        return AMDSMI_STATUS_INVAL;
    listed = listed_processes(d);
    if (*max_processes == 0) {
        /* The size probe: processes that start from here on are the kit's `grow`. */
        *max_processes = (uint32_t)(listed + fl_extra_rows(d, 0, listed, 0));
        return AMDSMI_STATUS_SUCCESS;
    }
    if (!list)
        return AMDSMI_STATUS_INVAL;
    extra = fl_extra_rows(d, 1, listed, (int)*max_processes);
    total = listed + extra;
    calls = list_calls[d]++;
    for (int k = 0; k < total && k < (int)*max_processes; k++) {
        int row, owner = k < listed ? nth_process(d, k, &row) : -1;
        if (owner >= 0) {
            fill_row(&list[k], owner, row, calls);
        } else {
            memset(&list[k], 0, sizeof list[k]);
            copy(list[k].name, sizeof list[k].name, "python3");
            list[k].pid = (uint32_t)(900000 + k);
            list[k].cu_occupancy = 0xFFFFFFFFu;
        }
    }
    if ((uint32_t)total > *max_processes) {
        *max_processes = (uint32_t)total; /* filled what fits; the real count, and this status */
        return AMDSMI_STATUS_OUT_OF_RESOURCES;
    }
    *max_processes = (uint32_t)total;
    return AMDSMI_STATUS_SUCCESS;
}
