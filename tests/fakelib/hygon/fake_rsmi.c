/*
 * A fake of Hygon's ROCm SMI fork (librocm_smi64.so) for tests, on the fake-library kit
 * (tests/fakelib), compiled against our own declarations (include/hygon_rsmi.h). What it answers
 * comes from the scenario named by $FAKE_HYGON_RSMI_SCENARIO, read at each rsmi_init, with the
 * kit's common faults (init code, faults per entry point and per device, hangs, a device lost
 * after k identity reads, a device leaving enumeration). Behaviours the backend depends on:
 *
 *   - the system-wide process list: a NULL buffer answers the count (SUCCESS, or
 *     INSUFFICIENT_SIZE with the count where the scenario says the fork does so: `probe_code`);
 *     a buffer too small answers INSUFFICIENT_SIZE; processes that start between the probe and
 *     the read (`grow`: once; `grow_always`: before every read);
 *   - per-process device lists (NULL probe, then read) and per-device rows, VRAM in bytes,
 *     cu_occupancy in percent or CU_OCCUPANCY_INVALID; Hygon's _v2 row, VRAM in MiB;
 *   - NOT_FOUND for a process that is not (or no longer) there; a lost card answering
 *     `lost_code` (FILE_ERROR by default: its sysfs files are gone) from every device call;
 *   - links and placement (R-X3): each card's NUMA node (`numa`; absent: NOT_SUPPORTED) and the
 *     link type and hops of a pair (`links` of either card, keyed by the other's scenario
 *     position; a pair in neither answers NOT_SUPPORTED);
 *   - the health figures (issue 29): the energy counter and its resolution, each clock domain's
 *     levels and current index (NOT_SUPPORTED for domains other than sys and mem), the PCIe
 *     replay counter, retired pages (a NULL buffer answers the count; a short one
 *     INSUFFICIENT_SIZE); all-ones values answered as the scenario gives them.
 *
 * Scenario (see tests/fakelib/hygon/__init__.py): init, driver, probe_code, grow, grow_always,
 * devices[] of {unique_id, bdf, name, serial, vram_total, vram_used (bytes), busy, mem_busy (the
 * memory's busy %), temp_edge, temp_junction (millidegrees), power (microwatts), power_type,
 * ecc_corr, ecc_unc, lost_code,
 * energy (counts), energy_resolution (microjoules per count), clocks{sys, mem}{levels[] (Hz),
 * current (index; all ones: none)}, clock_faults{sys, mem}, pcie_replays, pages[] (retired
 * page states: 0 reserved, 1 pending, 2 unreservable), numa, links{<position>: {type, hops}}},
 * processes[] of {pid, pasid, vram, sdma, cu, devices[] of {dev, vram, cu}, v2{vram_mib,
 * rates[]}, faults{}} plus the kit's fault keys.
 */
#include "fakelib.h"
#include "hygon_rsmi.h"

#define D "devices.%d."
#define P "processes.%d."
#define EXTRA_PID 90000

static int initialised;
static int grown;

/* The device behind an index, or -1 with *rc set to what the call must answer. */
static int device(uint32_t dv, const char *entry, rsmi_status_t *rc) {
    int present[FL_MAX_DEVICES], n, code;
    fl_hang(entry);
    if (!initialised) {
        *rc = RSMI_STATUS_INIT_ERROR;
        return -1;
    }
    n = fl_present_devices(present, FL_MAX_DEVICES);
    if ((int)dv >= n) {
        *rc = RSMI_STATUS_INVALID_ARGS;
        return -1;
    }
    if (fl_lost(present[dv])) {
        *rc = (rsmi_status_t)fl_int(RSMI_STATUS_FILE_ERROR, D "lost_code", present[dv]);
        return -1;
    }
    code = fl_fault(entry, present[dv]);
    *rc = code ? (rsmi_status_t)code : RSMI_STATUS_SUCCESS;
    return code ? -1 : present[dv];
}

#define DEVICE(entry)                                                                             \
    rsmi_status_t rc;                                                                             \
    int d = device(dv_ind, entry, &rc);                                                           \
    if (d < 0)                                                                                    \
        return rc;

static rsmi_status_t copy_text(char *out, size_t len, const char *value) {
    if (!out || len == 0)
        return RSMI_STATUS_INVALID_ARGS;
    snprintf(out, len, "%s", value);
    return strlen(value) + 1 > len ? RSMI_STATUS_INSUFFICIENT_SIZE : RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_init(uint64_t init_flags) {
    int code;
    (void)init_flags;
    if (fl_load() != 0)
        return RSMI_STATUS_INIT_ERROR;
    if ((code = (int)fl_int(0, "init")) != 0)
        return (rsmi_status_t)code;
    grown = 0;
    initialised++;
    return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_shut_down(void) {
    if (!initialised)
        return RSMI_STATUS_INIT_ERROR;
    initialised--;
    return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_num_monitor_devices(uint32_t *num_devices) {
    int present[FL_MAX_DEVICES];
    int code = fl_fault("rsmi_num_monitor_devices", -1);
    fl_hang("rsmi_num_monitor_devices");
    if (!initialised)
        return RSMI_STATUS_INIT_ERROR;
    if (code)
        return (rsmi_status_t)code;
    fl_enumerate();
    *num_devices = (uint32_t)fl_present_devices(present, FL_MAX_DEVICES);
    return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_version_str_get(rsmi_sw_component_t component, char *ver_str, uint32_t len) {
    int code = fl_fault("rsmi_version_str_get", -1);
    if (!initialised)
        return RSMI_STATUS_INIT_ERROR;
    if (code)
        return (rsmi_status_t)code;
    if (component != RSMI_SW_COMP_DRIVER)
        return RSMI_STATUS_INVALID_ARGS;
    return copy_text(ver_str, len, fl_str("6.3.8-V1.11.0", "driver"));
}

rsmi_status_t rsmi_dev_unique_id_get(uint32_t dv_ind, uint64_t *id) {
    DEVICE("rsmi_dev_unique_id_get");
    fl_identity_read(d);
    if (fl_lost(d)) /* lost mid-read: this was one read too many */
        return (rsmi_status_t)fl_int(RSMI_STATUS_FILE_ERROR, D "lost_code", d);
    *id = fl_u64(0, D "unique_id", d);
    return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_pci_id_get(uint32_t dv_ind, uint64_t *bdfid) {
    DEVICE("rsmi_dev_pci_id_get");
    *bdfid = fl_u64(0, D "bdf", d);
    return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_name_get(uint32_t dv_ind, char *name, size_t len) {
    DEVICE("rsmi_dev_name_get");
    return copy_text(name, len, fl_str("K100_AI", D "name", d));
}

rsmi_status_t rsmi_dev_serial_number_get(uint32_t dv_ind, char *serial_num, uint32_t len) {
    DEVICE("rsmi_dev_serial_number_get");
    return copy_text(serial_num, len, fl_str("", D "serial", d));
}

rsmi_status_t rsmi_dev_memory_total_get(uint32_t dv_ind, rsmi_memory_type_t mem_type,
                                        uint64_t *total) {
    DEVICE("rsmi_dev_memory_total_get");
    if (mem_type != RSMI_MEM_TYPE_VRAM)
        return RSMI_STATUS_NOT_SUPPORTED;
    *total = fl_u64(0, D "vram_total", d);
    return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_memory_usage_get(uint32_t dv_ind, rsmi_memory_type_t mem_type,
                                        uint64_t *used) {
    DEVICE("rsmi_dev_memory_usage_get");
    if (mem_type != RSMI_MEM_TYPE_VRAM)
        return RSMI_STATUS_NOT_SUPPORTED;
    *used = fl_u64(0, D "vram_used", d);
    return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_busy_percent_get(uint32_t dv_ind, uint32_t *busy_percent) {
    DEVICE("rsmi_dev_busy_percent_get");
    *busy_percent = (uint32_t)fl_int(0, D "busy", d);
    return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_memory_busy_percent_get(uint32_t dv_ind, uint32_t *busy_percent) {
    DEVICE("rsmi_dev_memory_busy_percent_get");
    if (!busy_percent)
        return RSMI_STATUS_INVALID_ARGS;
    *busy_percent = (uint32_t)fl_int(0, D "mem_busy", d);
    return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_temp_metric_get(uint32_t dv_ind, uint32_t sensor_type,
                                       rsmi_temperature_metric_t metric, int64_t *temperature) {
    const char *value;
    DEVICE("rsmi_dev_temp_metric_get");
    if (metric != RSMI_TEMP_CURRENT)
        return RSMI_STATUS_NOT_SUPPORTED;
    value = sensor_type == RSMI_TEMP_TYPE_EDGE       ? fl_get(D "temp_edge", d)
            : sensor_type == RSMI_TEMP_TYPE_JUNCTION ? fl_get(D "temp_junction", d)
                                                     : NULL;
    if (!value)
        return RSMI_STATUS_NOT_SUPPORTED;
    *temperature = strtoll(value, NULL, 10);
    return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_power_get(uint32_t dv_ind, uint64_t *power, RSMI_POWER_TYPE *type) {
    DEVICE("rsmi_dev_power_get");
    *power = fl_u64(0, D "power", d);
    *type = (RSMI_POWER_TYPE)fl_int(RSMI_CURRENT_POWER, D "power_type", d);
    return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_power_ave_get(uint32_t dv_ind, uint32_t sensor_ind, uint64_t *power) {
    DEVICE("rsmi_dev_power_ave_get");
    if (sensor_ind != 0)
        return RSMI_STATUS_INVALID_ARGS;
    *power = fl_u64(0, D "power", d);
    return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_ecc_count_get(uint32_t dv_ind, rsmi_gpu_block_t block,
                                     rsmi_error_count_t *ec) {
    DEVICE("rsmi_dev_ecc_count_get");
    if (block != RSMI_GPU_BLOCK_UMC)
        return RSMI_STATUS_NOT_SUPPORTED;
    memset(ec, 0, sizeof *ec);
    ec->correctable_err = fl_u64(0, D "ecc_corr", d);
    ec->uncorrectable_err = fl_u64(0, D "ecc_unc", d);
    ec->reserved[4] = 0xA5A5A5A5A5A5A5A5ULL; /* written so a short struct would be overrun */
    return RSMI_STATUS_SUCCESS;
}

/* -- the card's energy, clocks, PCIe replays and retired pages (issue 29) ------------------ */

rsmi_status_t rsmi_dev_energy_count_get(uint32_t dv_ind, uint64_t *power, float *counter_resolution,
                                        uint64_t *timestamp) {
    DEVICE("rsmi_dev_energy_count_get");
    if (!power || !counter_resolution || !timestamp)
        return RSMI_STATUS_INVALID_ARGS;
    *power = fl_u64(0, D "energy", d); /* counts of counter_resolution microjoules */
    *counter_resolution = (float)fl_double(15.3, D "energy_resolution", d);
    *timestamp = fl_u64(1764000000000000000ULL, D "energy_at", d); /* ns */
    return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_gpu_clk_freq_get(uint32_t dv_ind, rsmi_clk_type_t clk_type,
                                        rsmi_frequencies_t *f) {
    const char *domain = clk_type == RSMI_CLK_TYPE_SYS ? "sys"
                         : clk_type == RSMI_CLK_TYPE_MEM ? "mem"
                                                         : NULL;
    const char *fault;
    int n;
    DEVICE("rsmi_dev_gpu_clk_freq_get");
    if (!f)
        return RSMI_STATUS_INVALID_ARGS;
    if (!domain)
        return RSMI_STATUS_NOT_SUPPORTED;
    if ((fault = fl_get(D "clock_faults.%s", d, domain)) != NULL)
        return (rsmi_status_t)atoi(fault); /* one clock domain not served */
    memset(f, 0, sizeof *f);
    n = fl_count(D "clocks.%s.levels", d, domain);
    if (n == 0) { /* the fake's default levels, Hz */
        static const uint64_t sys[] = {300000000ULL, 1000000000ULL, 1500000000ULL};
        static const uint64_t mem[] = {1800000000ULL};
        const uint64_t *levels = clk_type == RSMI_CLK_TYPE_SYS ? sys : mem;
        n = clk_type == RSMI_CLK_TYPE_SYS ? 3 : 1;
        for (int i = 0; i < n; i++)
            f->frequency[i] = levels[i];
        f->current = (uint32_t)(n - 1);
    } else {
        for (int i = 0; i < n && i < RSMI_MAX_NUM_FREQUENCIES; i++)
            f->frequency[i] = fl_u64(0, D "clocks.%s.levels.%d", d, domain, i);
        f->current = (uint32_t)fl_u64(0, D "clocks.%s.current", d, domain);
    }
    f->num_supported = (uint32_t)(n < RSMI_MAX_NUM_FREQUENCIES ? n : RSMI_MAX_NUM_FREQUENCIES);
    return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_pci_replay_counter_get(uint32_t dv_ind, uint64_t *counter) {
    DEVICE("rsmi_dev_pci_replay_counter_get");
    if (!counter)
        return RSMI_STATUS_INVALID_ARGS;
    *counter = fl_u64(0, D "pcie_replays", d);
    return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_memory_reserved_pages_get(uint32_t dv_ind, uint32_t *num_pages,
                                                 rsmi_retired_page_record_t *records) {
    uint32_t n;
    DEVICE("rsmi_dev_memory_reserved_pages_get");
    if (!num_pages)
        return RSMI_STATUS_INVALID_ARGS;
    n = (uint32_t)fl_count(D "pages", d);
    if (!records) { /* the probe: how many records there are */
        *num_pages = n;
        return RSMI_STATUS_SUCCESS;
    }
    for (uint32_t i = 0; i < n && i < *num_pages; i++) {
        records[i].page_address = 0x100000000ULL + (uint64_t)i * 4096;
        records[i].page_size = 4096;
        records[i].status = (rsmi_memory_page_status_t)fl_int(0, D "pages.%d", d, (int)i);
    }
    if (*num_pages < n) {
        *num_pages = n;
        return RSMI_STATUS_INSUFFICIENT_SIZE;
    }
    *num_pages = n;
    return RSMI_STATUS_SUCCESS;
}

/* -- processes ------------------------------------------------------------------------------ */

/* How many processes a list call sees: the scenario's, plus those that started since. */
rsmi_status_t rsmi_topo_get_numa_node_number(uint32_t dv_ind, uint32_t *numa_node) {
    DEVICE("rsmi_topo_get_numa_node_number");
    if (!numa_node)
        return RSMI_STATUS_INVALID_ARGS;
    if (!fl_get(D "numa", d))
        return RSMI_STATUS_NOT_SUPPORTED;
    *numa_node = (uint32_t)fl_int(0, D "numa", d);
    return RSMI_STATUS_SUCCESS;
}

static const char *link_field(int a, int b, const char *field) {
    const char *value = fl_get(D "links.%d.%s", a, b, field);
    return value ? value : fl_get(D "links.%d.%s", b, a, field);
}

rsmi_status_t rsmi_topo_get_link_type(uint32_t dv_ind_src, uint32_t dv_ind_dst, uint64_t *hops,
                                      RSMI_IO_LINK_TYPE *type) {
    rsmi_status_t rc;
    int a = device(dv_ind_src, "rsmi_topo_get_link_type", &rc), b;
    if (a < 0)
        return rc;
    if ((b = device(dv_ind_dst, "rsmi_topo_get_link_type", &rc)) < 0)
        return rc;
    if (!hops || !type)
        return RSMI_STATUS_INVALID_ARGS;
    if (!link_field(a, b, "type"))
        return RSMI_STATUS_NOT_SUPPORTED;
    *type = (RSMI_IO_LINK_TYPE)atoll(link_field(a, b, "type"));
    *hops = link_field(a, b, "hops") ? (uint64_t)atoll(link_field(a, b, "hops")) : 1u;
    return RSMI_STATUS_SUCCESS;
}

static int extra_processes(int reading, uint32_t capacity) {
    long long grow = fl_int(0, "grow");
    int listed = fl_count("processes");
    if (grow <= 0)
        return 0;
    if (fl_int(0, "grow_always")) {
        int extra = (int)capacity + (int)grow - listed;
        return reading && extra > 0 ? extra : 0;
    }
    if (reading)
        grown = 1;
    return grown ? (int)grow : 0;
}

/* The scenario position of a listed pid, -1 for a process that started after the probe (it
 * runs on the first device), -2 for none. */
static int find(uint32_t pid) {
    for (int i = 0; i < fl_count("processes"); i++)
        if ((uint32_t)fl_int(0, P "pid", i) == pid)
            return i;
    return pid >= EXTRA_PID && (int)(pid - EXTRA_PID) < extra_processes(0, 0) ? -1 : -2;
}

static int process_fault(int i, const char *entry) {
    return i >= 0 ? (int)fl_int(0, P "faults.%s", i, entry) : 0;
}

rsmi_status_t rsmi_compute_process_info_get(rsmi_process_info_t *procs, uint32_t *num_items) {
    int listed, extra, code = fl_fault("rsmi_compute_process_info_get", -1);
    uint32_t total;
    fl_hang("rsmi_compute_process_info_get");
    if (!initialised)
        return RSMI_STATUS_INIT_ERROR;
    if (code)
        return (rsmi_status_t)code;
    if (!num_items)
        return RSMI_STATUS_INVALID_ARGS;
    listed = fl_count("processes");
    extra = extra_processes(procs != NULL, procs ? *num_items : 0);
    total = (uint32_t)(listed + extra);
    if (!procs) {
        *num_items = total;
        /* Some builds answer the size probe with INSUFFICIENT_SIZE and the count. */
        return total ? (rsmi_status_t)fl_int(RSMI_STATUS_SUCCESS, "probe_code")
                     : RSMI_STATUS_SUCCESS;
    }
    for (uint32_t i = 0; i < total && i < *num_items; i++) {
        rsmi_process_info_t *p = &procs[i];
        memset(p, 0, sizeof *p);
        if ((int)i < listed) {
            p->process_id = (uint32_t)fl_int(0, P "pid", (int)i);
            p->pasid = (uint32_t)fl_int(0, P "pasid", (int)i);
            p->vram_usage = fl_u64(0, P "vram", (int)i);
            p->sdma_usage = fl_u64(0, P "sdma", (int)i);
            p->cu_occupancy = (uint32_t)fl_u64(CU_OCCUPANCY_INVALID, P "cu", (int)i);
        } else {
            p->process_id = EXTRA_PID + (i - (uint32_t)listed);
            p->vram_usage = 1048576;
            p->cu_occupancy = 1;
        }
    }
    if (total > *num_items) {
        return RSMI_STATUS_INSUFFICIENT_SIZE; /* *num_items rows were written */
    }
    *num_items = total;
    return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_compute_process_gpus_get(uint32_t pid, uint32_t *dv_indices,
                                            uint32_t *num_devices) {
    int i = find(pid), code = fl_fault("rsmi_compute_process_gpus_get", -1);
    uint32_t n;
    fl_hang("rsmi_compute_process_gpus_get");
    if (!initialised)
        return RSMI_STATUS_INIT_ERROR;
    if (!code)
        code = process_fault(i, "rsmi_compute_process_gpus_get");
    if (code)
        return (rsmi_status_t)code;
    if (!num_devices)
        return RSMI_STATUS_INVALID_ARGS;
    if (i == -2)
        return RSMI_STATUS_NOT_FOUND;
    n = i == -1 ? 1 : (uint32_t)fl_count(P "devices", i);
    if (!dv_indices) {
        *num_devices = n;
        return RSMI_STATUS_SUCCESS;
    }
    for (uint32_t k = 0; k < n && k < *num_devices; k++)
        dv_indices[k] = i == -1 ? 0 : (uint32_t)fl_int(0, P "devices.%d.dev", i, (int)k);
    if (n > *num_devices)
        return RSMI_STATUS_INSUFFICIENT_SIZE;
    *num_devices = n;
    return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_compute_process_info_by_device_get(uint32_t pid, uint32_t dv_ind,
                                                      rsmi_process_info_t *proc) {
    int i = find(pid), code;
    DEVICE("rsmi_compute_process_info_by_device_get");
    (void)d;
    if ((code = process_fault(i, "rsmi_compute_process_info_by_device_get")) != 0)
        return (rsmi_status_t)code;
    if (!proc)
        return RSMI_STATUS_INVALID_ARGS;
    if (i == -2)
        return RSMI_STATUS_NOT_FOUND;
    memset(proc, 0, sizeof *proc);
    proc->process_id = pid;
    if (i == -1) {
        if (dv_ind != 0)
            return RSMI_STATUS_NOT_FOUND;
        proc->vram_usage = 1048576;
        proc->cu_occupancy = 1;
        return RSMI_STATUS_SUCCESS;
    }
    for (int k = 0; k < fl_count(P "devices", i); k++) {
        if ((uint32_t)fl_int(-1, P "devices.%d.dev", i, k) != dv_ind)
            continue;
        proc->pasid = (uint32_t)fl_int(0, P "pasid", i);
        proc->vram_usage = fl_u64(0, P "devices.%d.vram", i, k);
        proc->sdma_usage = fl_u64(0, P "sdma", i);
        proc->cu_occupancy = (uint32_t)fl_u64(CU_OCCUPANCY_INVALID, P "devices.%d.cu", i, k);
        return RSMI_STATUS_SUCCESS;
    }
    return RSMI_STATUS_NOT_FOUND; /* the process does not use this device */
}

rsmi_status_t rsmi_compute_process_info_by_pid_get_v2(uint32_t pid,
                                                      rsmi_process_info_v2_t *proc) {
    int i = find(pid), code = fl_fault("rsmi_compute_process_info_by_pid_get_v2", -1);
    int n;
    fl_hang("rsmi_compute_process_info_by_pid_get_v2");
    if (!initialised)
        return RSMI_STATUS_INIT_ERROR;
    if (!code)
        code = process_fault(i, "rsmi_compute_process_info_by_pid_get_v2");
    if (code)
        return (rsmi_status_t)code;
    if (!proc)
        return RSMI_STATUS_INVALID_ARGS;
    if (i < 0)
        return RSMI_STATUS_NOT_FOUND;
    memset(proc, 0, sizeof *proc);
    n = fl_count(P "devices", i);
    proc->processId = pid;
    proc->vramUsageSize = fl_u64(0, P "v2.vram_mib", i);
    proc->vramUsageRate = (float)fl_double(0, P "v2.vram_rate", i);
    proc->usedGpus = n;
    for (int k = 0; k < n && k < 16; k++) {
        proc->gpuIndex[k] = (int)fl_int(0, P "devices.%d.dev", i, k);
        proc->gpuUsageRate[k] = (float)fl_double(0, P "v2.rates.%d", i, k);
    }
    return RSMI_STATUS_SUCCESS;
}
