/*
 * A fake libdcmi.so for tests: the DCMI entry points the ascend backend calls through our own
 * ctypes declarations (vendors/_ascend_lib.py), compiled against this project's dcmi.h. Built
 * and driven by the fake-library kit (tests/fakelib): what it answers comes from the scenario
 * named by $FAKE_DCMI_SCENARIO, read at each dcmi_init, with the kit's common faults (init code,
 * faults per entry point, hangs, a device lost after k die reads, a device leaving enumeration).
 * It reproduces the driver behaviours the backend depends on (reference notes §6, §12.3):
 *
 *   - (card, device) addressing: several devices on one card, NPUs beside an MCU, logic and
 *     physical ids that differ from the card number;
 *   - dcmi_get_device_resource_info writes every process it has into the caller's buffer and
 *     overwrites the count, whatever the caller passed: the caller cannot bound it;
 *   - negative DCMI codes (-8001.. -8255) from any call, per device;
 *   - the VDEV_MNG sub-commands of dcmi_get_device_info: the vNPU list (1), one vNPU's template
 *     and resources (0), its activity (5), each refusable on its own;
 *   - a lost device answering -8008 (or its own code) from every call;
 *   - links and placement (R-X3): each NPU's PCI address (dcmi_get_device_pcie_info_v2; bus
 *     `bus`, default 0x01 + 0x10 x its position), and the topology type of a pair (`topo` of
 *     either NPU, keyed by the other's scenario position; SELF for an NPU with itself; a pair
 *     in neither answers DCMI_ERR_NOT_SUPPORT).
 *
 * Scenario (JSON, see tests/fakelib/ascend/__init__.py): driver, devices[] of {card, device,
 * type, logic, phy, die[5], chip{type, name, ver, aicore}, hbm{size, usage, freq, temp} (MB),
 * memory{size, available} (MB), aicore, temp, power (0.1 W), health, error_codes[] (the error
 * codes the NPU reports now, decimal; error_count: the count to answer instead of their number,
 * as a driver past its list would), processes[]{pid, mem},
 * reported_count, vdevs[]{id, template, aic, memory (MB), util, total_kb, free_kb}, lost_code,
 * domain, bus, topo{<position>: type}}
 * plus the kit's fault keys. Compiled with -DFAKE_DCMI_OLD_DRIVER it leaves out the entry points
 * an older driver lacks (dcmi_get_device_die_v2, dcmi_get_driver_version).
 */
#include "dcmi.h"
#include "fakelib.h"

#define D "devices.%d."

static int initialised;

/* The scenario entry for (card, device) among the devices still enumerated, or -1. */
static int find(int card, int device) {
    int present[FL_MAX_DEVICES], n = fl_present_devices(present, FL_MAX_DEVICES);
    for (int i = 0; i < n; i++) {
        int d = present[i];
        if (fl_int(-1, D "card", d) == card && fl_int(-1, D "device", d) == device)
            return d;
    }
    return -1;
}

/* The entry behind (card, device), or -1 with *rc set to what the call must answer first. */
static int entry(int card, int device, const char *name, int *rc) {
    int d, code;
    fl_hang(name);
    if (!initialised) {
        *rc = DCMI_ERR_INVALID_PARAMETER;
        return -1;
    }
    d = find(card, device);
    if (d < 0) {
        *rc = DCMI_ERR_INVALID_DEVICE_ID;
        return -1;
    }
    if (fl_lost(d)) {
        *rc = (int)fl_int(DCMI_ERR_DEVICE_NOT_EXIST, D "lost_code", d);
        return -1;
    }
    code = fl_fault(name, d);
    *rc = code;
    return code ? -1 : d;
}

#define ENTRY(name)                                                                               \
    int rc;                                                                                       \
    int d = entry(card_id, device_id, name, &rc);                                                 \
    if (d < 0)                                                                                    \
        return rc;

static int plain_fault(const char *name) {
    fl_hang(name);
    if (!initialised)
        return DCMI_ERR_INVALID_PARAMETER;
    return fl_fault(name, -1);
}

static void copy_text(unsigned char *out, size_t size, const char *text) {
    memset(out, 0, size);
    strncpy((char *)out, text, size - 1);
}

int dcmi_init(void) {
    int code;
    if (fl_load() != 0)
        return DCMI_ERR_DEVICE_NOT_EXIST; /* no scenario: as if no driver were loaded */
    if ((code = (int)fl_int(0, "init")) != 0)
        return code;
    initialised = 1;
    return DCMI_OK;
}

#ifndef FAKE_DCMI_OLD_DRIVER
int dcmi_get_driver_version(char *driver_ver, unsigned int len) {
    int code = plain_fault("dcmi_get_driver_version");
    const char *text = fl_str("25.5.1", "driver");
    if (code)
        return code;
    if (!driver_ver || strlen(text) + 1 > len)
        return DCMI_ERR_INVALID_PARAMETER;
    strcpy(driver_ver, text);
    return DCMI_OK;
}
#endif

int dcmi_get_card_list(int *card_num, int *card_list, int list_len) {
    int present[FL_MAX_DEVICES], n, cards = 0, code = plain_fault("dcmi_get_card_list");
    if (code)
        return code;
    fl_enumerate();
    n = fl_present_devices(present, FL_MAX_DEVICES);
    for (int i = 0; i < n; i++) {
        int card = (int)fl_int(0, D "card", present[i]), seen = 0;
        for (int j = 0; j < i; j++)
            seen |= fl_int(0, D "card", present[j]) == card;
        if (!seen) {
            if (cards < list_len)
                card_list[cards] = card;
            cards++;
        }
    }
    *card_num = cards;
    return DCMI_OK;
}

int dcmi_get_device_num_in_card(int card_id, int *device_num) {
    int present[FL_MAX_DEVICES], n, count = 0, code = plain_fault("dcmi_get_device_num_in_card");
    if (code)
        return code;
    n = fl_present_devices(present, FL_MAX_DEVICES);
    for (int i = 0; i < n; i++)
        count += fl_int(-1, D "card", present[i]) == card_id;
    if (!count)
        return DCMI_ERR_INVALID_DEVICE_ID;
    *device_num = count;
    return DCMI_OK;
}

int dcmi_get_device_type(int card_id, int device_id, int *device_type) {
    ENTRY("dcmi_get_device_type");
    *device_type = (int)fl_int(0, D "type", d);
    return DCMI_OK;
}

int dcmi_get_device_logic_id(int *device_logic_id, int card_id, int device_id) {
    ENTRY("dcmi_get_device_logic_id");
    *device_logic_id = (int)fl_int(d, D "logic", d);
    return DCMI_OK;
}

int dcmi_get_device_phyid_from_logicid(unsigned int logicid, unsigned int *phyid) {
    int present[FL_MAX_DEVICES], n, code = plain_fault("dcmi_get_device_phyid_from_logicid");
    if (code)
        return code;
    n = fl_present_devices(present, FL_MAX_DEVICES);
    for (int i = 0; i < n; i++) {
        int d = present[i];
        if (fl_int(d, D "logic", d) == (long long)logicid) {
            if (fl_lost(d))
                return (int)fl_int(DCMI_ERR_DEVICE_NOT_EXIST, D "lost_code", d);
            if ((code = fl_fault("dcmi_get_device_phyid_from_logicid", d)))
                return code;
            *phyid = (unsigned int)fl_int(d, D "phy", d);
            return DCMI_OK;
        }
    }
    return DCMI_ERR_INVALID_DEVICE_ID;
}

static int die(int card_id, int device_id, const char *name, struct dcmi_die_id *die_id) {
    int rc, d;
    if (initialised) {
        int found = find(card_id, device_id);
        fl_identity_read(found); /* a device that falls off after `lost_after` of these */
    }
    d = entry(card_id, device_id, name, &rc);
    if (d < 0)
        return rc;
    for (int i = 0; i < DCMI_DIE_ID_COUNT; i++)
        die_id->soc_die[i] = (unsigned int)fl_u64(0, D "die.%d", d, i);
    return DCMI_OK;
}

#ifndef FAKE_DCMI_OLD_DRIVER
int dcmi_get_device_die_v2(int card_id, int device_id, int input_type, struct dcmi_die_id *die_id) {
    if (input_type != 1) /* VDIE only: the NDIE is not what identifies a chip */
        return DCMI_ERR_NOT_SUPPORT;
    return die(card_id, device_id, "dcmi_get_device_die_v2", die_id);
}
#endif

int dcmi_get_device_die(int card_id, int device_id, struct dcmi_die_id *die_id) {
    return die(card_id, device_id, "dcmi_get_device_die", die_id);
}

int dcmi_get_device_chip_info(int card_id, int device_id, struct dcmi_chip_info *chip_info) {
    ENTRY("dcmi_get_device_chip_info");
    copy_text(chip_info->chip_type, sizeof chip_info->chip_type, fl_str("Ascend", D "chip.type", d));
    copy_text(chip_info->chip_name, sizeof chip_info->chip_name, fl_str("910B2", D "chip.name", d));
    copy_text(chip_info->chip_ver, sizeof chip_info->chip_ver, fl_str("V1", D "chip.ver", d));
    chip_info->aicore_cnt = (unsigned int)fl_int(24, D "chip.aicore", d);
    return DCMI_OK;
}

int dcmi_get_device_hbm_info(int card_id, int device_id, struct dcmi_hbm_info *hbm_info) {
    ENTRY("dcmi_get_device_hbm_info");
    memset(hbm_info, 0, sizeof *hbm_info);
    hbm_info->memory_size = fl_u64(0, D "hbm.size", d);
    hbm_info->memory_usage = fl_u64(0, D "hbm.usage", d);
    hbm_info->freq = (unsigned int)fl_int(1600, D "hbm.freq", d);
    hbm_info->temp = (int)fl_int(40, D "hbm.temp", d);
    hbm_info->bandwith_util_rate = (unsigned int)fl_int(0, D "hbm.bw", d);
    return DCMI_OK;
}

int dcmi_get_device_memory_info_v3(int card_id, int device_id,
                                   struct dcmi_get_memory_info_stru *memory_info) {
    ENTRY("dcmi_get_device_memory_info_v3");
    memset(memory_info, 0, sizeof *memory_info);
    memory_info->memory_size = fl_u64(0, D "memory.size", d);
    memory_info->memory_available = fl_u64(0, D "memory.available", d);
    memory_info->freq = (unsigned int)fl_int(3200, D "memory.freq", d);
    memory_info->hugepagesize = (unsigned long)fl_int(2048, D "memory.hugepagesize", d);
    memory_info->utiliza = (unsigned int)fl_int(0, D "memory.utiliza", d);
    return DCMI_OK;
}

int dcmi_get_device_utilization_rate(int card_id, int device_id, int input_type,
                                     unsigned int *utilization_rate) {
    const char *key;
    ENTRY("dcmi_get_device_utilization_rate");
    /* The AI cores (2), the HBM's bandwidth (10) and the vector cores (12) where the scenario
     * has them (issue 41); any other input type, or one the scenario leaves out, answers
     * NOT_SUPPORT, as a driver does for a unit the chip lacks. */
    key = input_type == 2 ? "aicore" : input_type == 10 ? "hbm_bandwidth" : input_type == 12 ? "vector_core" : NULL;
    if (!key || (input_type != 2 && !fl_get(D "%s", d, key)))
        return DCMI_ERR_NOT_SUPPORT;
    *utilization_rate = (unsigned int)fl_u64(0, D "%s", d, key);
    return DCMI_OK;
}

int dcmi_get_device_temperature(int card_id, int device_id, int *temperature) {
    ENTRY("dcmi_get_device_temperature");
    *temperature = (int)fl_int(40, D "temp", d);
    return DCMI_OK;
}

int dcmi_get_device_power_info(int card_id, int device_id, int *power) {
    ENTRY("dcmi_get_device_power_info");
    *power = (int)fl_int(900, D "power", d);
    return DCMI_OK;
}

int dcmi_get_device_health(int card_id, int device_id, unsigned int *health) {
    ENTRY("dcmi_get_device_health");
    *health = (unsigned int)fl_u64(0, D "health", d);
    return DCMI_OK;
}

int dcmi_get_device_pcie_info_v2(int card_id, int device_id, struct dcmi_pcie_info_all *pcie_info) {
    ENTRY("dcmi_get_device_pcie_info_v2");
    if (!pcie_info)
        return DCMI_ERR_INVALID_PARAMETER;
    memset(pcie_info, 0, sizeof(*pcie_info));
    pcie_info->venderid = 0x19e5; /* Huawei */
    pcie_info->deviceid = 0xd802;
    pcie_info->domain = (int)fl_int(0, D "domain", d);
    pcie_info->bdf_busid = (unsigned int)fl_int((0x01 + 0x10 * d) & 0xFF, D "bus", d);
    return DCMI_OK;
}

int dcmi_get_topo_info_by_device_id(int card_id1, int device_id1, int card_id2, int device_id2,
                                    int *topo_type) {
    int rc, a, b;
    const char *kind;
    if ((a = entry(card_id1, device_id1, "dcmi_get_topo_info_by_device_id", &rc)) < 0)
        return rc;
    if ((b = entry(card_id2, device_id2, "dcmi_get_topo_info_by_device_id", &rc)) < 0)
        return rc;
    if (!topo_type)
        return DCMI_ERR_INVALID_PARAMETER;
    if (a == b) {
        *topo_type = DCMI_TOPO_TYPE_SELF;
        return DCMI_OK;
    }
    kind = fl_get(D "topo.%d", a, b);
    if (!kind)
        kind = fl_get(D "topo.%d", b, a);
    if (!kind)
        return DCMI_ERR_NOT_SUPPORT;
    *topo_type = atoi(kind);
    return DCMI_OK;
}

/* The codes the NPU reports now: at most list_len written, the count as the scenario says. */
int dcmi_get_device_errorcode_v2(int card_id, int device_id, int *error_count,
                                 unsigned int *error_code_list, unsigned int list_len) {
    int n;
    ENTRY("dcmi_get_device_errorcode_v2");
    n = fl_count(D "error_codes", d);
    for (int i = 0; i < n && (unsigned int)i < list_len; i++)
        error_code_list[i] = (unsigned int)fl_u64(0, D "error_codes.%d", d, i);
    *error_count = (int)fl_int(n, D "error_count", d);
    return DCMI_OK;
}

/* -- the NPU's ECC and frequencies (issue 29) ------------------------------------------------ */

int dcmi_get_device_ecc_info(int card_id, int device_id, int input_type,
                             struct dcmi_ecc_info *device_ecc_info) {
    const char *kind = input_type == DCMI_DEVICE_TYPE_HBM   ? "hbm"
                       : input_type == DCMI_DEVICE_TYPE_DDR ? "ddr"
                                                            : NULL;
    ENTRY("dcmi_get_device_ecc_info");
    if (!device_ecc_info)
        return DCMI_ERR_INVALID_PARAMETER;
    /* A memory the NPU does not have (a 310P has no HBM, a 910 answers HBM): not supported. */
    if (!kind || strcmp(kind, fl_str("hbm", D "ecc_memory", d)) != 0)
        return DCMI_ERR_NOT_SUPPORT;
    memset(device_ecc_info, 0, sizeof *device_ecc_info);
    device_ecc_info->enable_flag = (int)fl_int(1, D "ecc.enable", d);
    device_ecc_info->single_bit_error_cnt = (unsigned int)fl_u64(0, D "ecc.single", d);
    device_ecc_info->double_bit_error_cnt = (unsigned int)fl_u64(0, D "ecc.double", d);
    device_ecc_info->total_single_bit_error_cnt = (unsigned int)fl_u64(0, D "ecc.total_single", d);
    device_ecc_info->total_double_bit_error_cnt = (unsigned int)fl_u64(0, D "ecc.total_double", d);
    device_ecc_info->single_bit_isolated_pages_cnt =
        (unsigned int)fl_u64(0, D "ecc.single_isolated", d);
    device_ecc_info->double_bit_isolated_pages_cnt =
        (unsigned int)fl_u64(0, D "ecc.double_isolated", d);
    device_ecc_info->single_bit_next_isolated_pages_cnt =
        (unsigned int)fl_u64(0, D "ecc.single_next", d);
    device_ecc_info->double_bit_next_isolated_pages_cnt =
        (unsigned int)fl_u64(0, D "ecc.double_next", d);
    return DCMI_OK;
}

int dcmi_get_device_frequency(int card_id, int device_id, int input_type, unsigned int *frequency) {
    const char *kind = input_type == DCMI_FREQ_AICORE_CURRENT ? "aicore"
                       : input_type == DCMI_FREQ_HBM          ? "hbm"
                       : input_type == DCMI_FREQ_DDR          ? "ddr"
                                                              : NULL;
    const char *value;
    ENTRY("dcmi_get_device_frequency");
    if (!frequency)
        return DCMI_ERR_INVALID_PARAMETER;
    if (!kind)
        return DCMI_ERR_NOT_SUPPORT;
    value = fl_get(D "freq.%s", d, kind);
    if (!value) { /* the fake's defaults, MHz: a 910B's AI cores and HBM; no DDR */
        if (strcmp(kind, "ddr") == 0)
            return DCMI_ERR_NOT_SUPPORT;
        *frequency = strcmp(kind, "aicore") == 0 ? 1800u : 1600u;
        return DCMI_OK;
    }
    if (strcmp(value, "unsupported") == 0)
        return DCMI_ERR_NOT_SUPPORT;
    *frequency = (unsigned int)strtoull(value, NULL, 10);
    return DCMI_OK;
}

int dcmi_get_device_resource_info(int card_id, int device_id, struct dcmi_proc_mem_info *proc_info,
                                  int *proc_num) {
    int n;
    ENTRY("dcmi_get_device_resource_info");
    n = fl_count(D "processes", d);
    /* As the driver does: every row it has, whatever *proc_num said on the way in. */
    for (int i = 0; i < n; i++) {
        proc_info[i].proc_id = (int)fl_int(0, D "processes.%d.pid", d, i);
        proc_info[i].proc_mem_usage = (unsigned long)fl_u64(0, D "processes.%d.mem", d, i);
    }
    *proc_num = (int)fl_int(n, D "reported_count", d);
    return DCMI_OK;
}

/* The vNPU entry with id `vdev` on device d, or -1. */
static int find_vdev(int d, unsigned int vdev) {
    int n = fl_count(D "vdevs", d);
    for (int v = 0; v < n; v++)
        if (fl_u64(0, D "vdevs.%d.id", d, v) == vdev)
            return v;
    return -1;
}

int dcmi_get_device_info(int card_id, int device_id, int main_cmd, unsigned int sub_cmd, void *buf,
                         unsigned int *size) {
    char name[64];
    int v;
    snprintf(name, sizeof name, "dcmi_get_device_info.%d.%u", main_cmd, sub_cmd);
    ENTRY(name);
    if (main_cmd != DCMI_MAIN_CMD_VDEV_MNG || !buf || !size)
        return DCMI_ERR_INVALID_PARAMETER;
    if (sub_cmd == DCMI_VDEV_SUB_TOTAL) {
        struct dcmi_soc_total_resource *total = buf;
        int n = fl_count(D "vdevs", d);
        if (*size < sizeof *total)
            return DCMI_ERR_INVALID_PARAMETER;
        memset(total, 0, sizeof *total);
        total->vdev_num = (unsigned int)fl_int(n, D "reported_vdev_num", d);
        for (v = 0; v < n && v < DCMI_SOC_SPLIT_MAX; v++)
            total->vdev_id[v] = (unsigned int)fl_u64(0, D "vdevs.%d.id", d, v);
        return DCMI_OK;
    }
    if (sub_cmd == DCMI_VDEV_SUB_RESOURCE || sub_cmd == DCMI_VDEV_SUB_ACTIVITY) {
        struct dcmi_vdev_query_stru *query = buf;
        struct dcmi_computing_resource *c = &query->query_info.computing;
        unsigned int vdev = query->vdev_id;
        if (*size < sizeof *query)
            return DCMI_ERR_INVALID_PARAMETER;
        v = find_vdev(d, vdev);
        if (v < 0)
            return DCMI_ERR_INVALID_PARAMETER; /* the driver's answer for an unknown vdev id */
        memset(&query->query_info, 0, sizeof query->query_info);
        if (sub_cmd == DCMI_VDEV_SUB_RESOURCE) {
            copy_text((unsigned char *)query->query_info.name, sizeof query->query_info.name,
                      fl_str("vir04", D "vdevs.%d.template", d, v));
            query->query_info.status = 1;
            query->query_info.is_container_used = 1;
            c->aic = (float)fl_double(4, D "vdevs.%d.aic", d, v);
            c->memory_size = fl_u64(16384, D "vdevs.%d.memory", d, v);
        } else {
            c->vdev_aicore_utilization = (unsigned int)fl_u64(0, D "vdevs.%d.util", d, v);
            c->vdev_memory_total = fl_u64(0, D "vdevs.%d.total_kb", d, v);
            c->vdev_memory_free = fl_u64(0, D "vdevs.%d.free_kb", d, v);
        }
        return DCMI_OK;
    }
    return DCMI_ERR_NOT_SUPPORT;
}
