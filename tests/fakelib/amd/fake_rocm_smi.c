/*
 * A fake librocm_smi64.so for the amd backend's fallback, with our own declarations
 * (rocm_smi_decl.h, written from the public rocm_smi.h). It reads the same scenario as
 * fake_amdsmi.c ($FAKE_AMDSMI_SCENARIO), so both libraries describe one node: each present
 * scenario device is an rsmi device (each XCP one of its own, as ROCm SMI enumerates them),
 * listed in reverse when `rsmi_reverse` is set, so the backend must match them by PCI id.
 *
 * What ROCm SMI does, as its source shows: the host-wide list has one entry per PID; a PID's
 * figures on a device it does not hold read 0 bytes and an invalid cu_occupancy (SUCCESS);
 * cu_occupancy is a percent of the device's compute units (CU count * 100 / CUs).
 * Faults: the kit's `faults.<entry>` and `init`; `rsmi_exited` lists PIDs that vanish between
 * the host-wide list and the per-PID calls (NOT_FOUND).
 */
#include "fakelib.h"
#include "rocm_smi_decl.h"

#define D "devices.%d."

static int initialised;

static void log_call(const char *name) {
    const char *path = fl_get("call_log");
    FILE *f;
    if (!path || !(f = fopen(path, "a")))
        return;
    fprintf(f, "%s\n", name);
    fclose(f);
}

/* The scenario device behind rsmi index `dv`, or -1. */
static int device_at(uint32_t dv) {
    int present[FL_MAX_DEVICES], n = fl_present_devices(present, FL_MAX_DEVICES);
    if (dv >= (uint32_t)n)
        return -1;
    return fl_int(0, "rsmi_reverse") ? present[n - 1 - (int)dv] : present[dv];
}

static int device_count(void) {
    int present[FL_MAX_DEVICES];
    return fl_present_devices(present, FL_MAX_DEVICES);
}

static int exited(uint32_t pid) {
    for (int i = 0; i < fl_count("rsmi_exited"); i++)
        if ((uint32_t)fl_int(-1, "rsmi_exited.%d", i) == pid)
            return 1;
    return 0;
}

/* The row of `pid` on scenario device `d`, or -1. */
static int row_of(int d, uint32_t pid) {
    for (int k = 0; k < fl_count(D "processes", d); k++)
        if ((uint32_t)fl_int(-1, D "processes.%d.pid", d, k) == pid)
            return k;
    return -1;
}

static rsmi_status_t gate(const char *entry) {
    int code = fl_fault(entry, -1);
    fl_hang(entry);
    if (!initialised)
        return RSMI_STATUS_INIT_ERROR;
    return code ? (rsmi_status_t)code : RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_init(uint64_t init_flags) {
    int code;
    (void)init_flags;
    if (fl_load() != 0)
        return RSMI_STATUS_INIT_ERROR;
    log_call("rsmi_init");
    if ((code = (int)fl_int(0, "rsmi_init")) != 0)
        return (rsmi_status_t)code;
    initialised = 1;
    return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_shut_down(void) {
    initialised = 0;
    return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_num_monitor_devices(uint32_t *num_devices) {
    rsmi_status_t rc = gate("rsmi_num_monitor_devices");
    if (rc)
        return rc;
    if (!num_devices)
        return RSMI_STATUS_INVALID_ARGS;
    *num_devices = (uint32_t)device_count();
    return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_dev_pci_id_get(uint32_t dv_ind, uint64_t *bdfid) {
    int d;
    rsmi_status_t rc = gate("rsmi_dev_pci_id_get");
    if (rc)
        return rc;
    if (!bdfid || (d = device_at(dv_ind)) < 0)
        return RSMI_STATUS_INVALID_ARGS;
    *bdfid = (fl_u64(0, D "domain", d) << 32) | ((fl_u64(0, D "partition", d) & 0xF) << 28) |
             (fl_u64(0, D "bus", d) << 8) | (fl_u64(0, D "device", d) << 3) |
             fl_u64(0, D "function", d);
    return RSMI_STATUS_SUCCESS;
}

/* The distinct PIDs of every device, in order of first appearance. */
static int pids(uint32_t *out, int capacity) {
    int n = 0, total = device_count();
    for (int i = 0; i < total; i++) {
        int d = device_at((uint32_t)i);
        for (int k = 0; k < fl_count(D "processes", d); k++) {
            uint32_t pid = (uint32_t)fl_int(0, D "processes.%d.pid", d, k);
            int seen = 0;
            for (int j = 0; j < n; j++)
                seen |= out[j] == pid;
            if (!seen && n < capacity)
                out[n++] = pid;
        }
    }
    return n;
}

static void fill(rsmi_process_info_t *proc, uint32_t pid, int d) {
    int k = d >= 0 ? row_of(d, pid) : -1;
    long long cu = k >= 0 ? fl_int(-1, D "processes.%d.cu", d, k) : -1;
    long long cus = d >= 0 ? fl_int(304, D "cus", d) : 0;
    memset(proc, 0, sizeof *proc);
    proc->process_id = pid;
    proc->pasid = 32768 + pid % 1000;
    if (k < 0) {
        proc->cu_occupancy = CU_OCCUPANCY_INVALID; /* not on this device: ENOENT in sysfs */
        return;
    }
    proc->vram_usage = fl_u64(0, D "processes.%d.vram", d, k);
    proc->sdma_usage = fl_u64(0, D "processes.%d.sdma", d, k);
    proc->cu_occupancy = (cu < 0 || cu > 0xFFFFFFFELL || cus <= 0)
                             ? CU_OCCUPANCY_INVALID
                             : (uint32_t)(cu * 100 / cus);
}

rsmi_status_t rsmi_compute_process_info_get(rsmi_process_info_t *procs, uint32_t *num_items) {
    uint32_t list[4096];
    int n;
    rsmi_status_t rc = gate("rsmi_compute_process_info_get");
    if (rc)
        return rc;
    if (!num_items)
        return RSMI_STATUS_INVALID_ARGS;
    n = pids(list, 4096);
    if (!procs) {
        *num_items = (uint32_t)n;
        return RSMI_STATUS_SUCCESS;
    }
    if (*num_items < (uint32_t)n)
        return RSMI_STATUS_INSUFFICIENT_SIZE;
    for (int i = 0; i < n; i++) {
        memset(&procs[i], 0, sizeof procs[i]);
        procs[i].process_id = list[i]; /* as ROCm SMI's host-wide list: ids only */
        procs[i].pasid = 32768 + list[i] % 1000;
    }
    *num_items = (uint32_t)n;
    return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_compute_process_gpus_get(uint32_t pid, uint32_t *dv_indices,
                                            uint32_t *num_devices) {
    uint32_t found[FL_MAX_DEVICES];
    int n = 0, total = device_count();
    rsmi_status_t rc = gate("rsmi_compute_process_gpus_get");
    if (rc)
        return rc;
    if (!num_devices)
        return RSMI_STATUS_INVALID_ARGS;
    if (exited(pid))
        return RSMI_STATUS_NOT_FOUND;
    for (int i = 0; i < total; i++)
        if (row_of(device_at((uint32_t)i), pid) >= 0)
            found[n++] = (uint32_t)i;
    if (!dv_indices) {
        *num_devices = (uint32_t)n;
        return RSMI_STATUS_SUCCESS;
    }
    if (*num_devices < (uint32_t)n)
        return RSMI_STATUS_INSUFFICIENT_SIZE;
    for (int i = 0; i < n; i++)
        dv_indices[i] = found[i];
    *num_devices = (uint32_t)n;
    return RSMI_STATUS_SUCCESS;
}

rsmi_status_t rsmi_compute_process_info_by_device_get(uint32_t pid, uint32_t dv_ind,
                                                      rsmi_process_info_t *proc) {
    int d;
    rsmi_status_t rc = gate("rsmi_compute_process_info_by_device_get");
    if (rc)
        return rc;
    if (!proc || (d = device_at(dv_ind)) < 0)
        return RSMI_STATUS_INVALID_ARGS;
    if (exited(pid))
        return RSMI_STATUS_NOT_FOUND;
    fill(proc, pid, d);
    return RSMI_STATUS_SUCCESS;
}
