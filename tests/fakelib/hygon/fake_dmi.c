/*
 * A fake libhydmi.so (Hygon's device management interface: virtual DCUs) for tests, on the
 * fake-library kit, compiled against our own declarations (include/hygon_dmi.h). It answers from
 * the scenario named by $FAKE_HYGON_DMI_SCENARIO (re-read when the file changes: the real library
 * has no init), with the kit's faults per entry point (`faults.<entry>`) and hangs.
 *
 * Scenario: devices.# (physical cards), vdevs[] of {index (node-global), name, cu, total, used
 * (bytes), container, device (the physical card's index), busy (percent; absent: the call
 * answers NOT_SUPPORTED), faults{}}. An index no vdev has answers VDEV_NOT_EXIST.
 */
#include "fake_scenario.h"
#include "hygon_dmi.h"

#define V "vdevs.%d."

static int vdev(int index) {
    for (int i = 0; i < fl_count("vdevs"); i++)
        if (fl_int(-1, V "index", i) == index)
            return i;
    return -1;
}

/* What `entry` must answer first (0: go on); *v is the scenario position of `index`, or -1. */
static int answer(const char *entry, int index, int *v) {
    int code;
    fl_hang(entry);
    if (fake_current() != 0)
        return DMI_STATUS_OPEN_MKFD_FAILED;
    if ((code = fl_fault(entry, -1)) != 0)
        return code;
    *v = index >= 0 ? vdev(index) : -1;
    return *v >= 0 ? (int)fl_int(0, V "faults.%s", *v, entry) : 0;
}

dmiStatus dmiGetDeviceCount(int *count) {
    int v, code = answer("dmiGetDeviceCount", -1, &v);
    if (code)
        return (dmiStatus)code;
    *count = fl_count("devices");
    return DMI_STATUS_SUCCESS;
}

dmiStatus dmiGetVDeviceCount(int *count) {
    int v, code = answer("dmiGetVDeviceCount", -1, &v);
    if (code)
        return (dmiStatus)code;
    *count = fl_count("vdevs");
    return DMI_STATUS_SUCCESS;
}

dmiStatus dmiGetVDeviceInfo(int vdevice_id, dmiDeviceInfo *device_info) {
    int v, code = answer("dmiGetVDeviceInfo", vdevice_id, &v);
    if (code)
        return (dmiStatus)code;
    if (!device_info)
        return DMI_STATUS_INVALID_ARGUMENTS;
    if (v < 0)
        return DMI_STATUS_VDEV_NOT_EXIST;
    memset(device_info, 0, sizeof *device_info);
    snprintf(device_info->name, sizeof device_info->name, "%s", fl_str("K100_AI", V "name", v));
    device_info->compute_unit_count = (int)fl_int(0, V "cu", v);
    device_info->global_mem_size = (size_t)fl_u64(0, V "total", v);
    device_info->usage_mem_size = (size_t)fl_u64(0, V "used", v);
    device_info->container_id = fl_u64(0, V "container", v);
    device_info->device_id = (int)fl_int(0, V "device", v);
    return DMI_STATUS_SUCCESS;
}

dmiStatus dmiGetVDevBusyPercent(int vdevice_id, int *busy_percent) {
    int v, code = answer("dmiGetVDevBusyPercent", vdevice_id, &v);
    const char *busy;
    if (code)
        return (dmiStatus)code;
    if (!busy_percent)
        return DMI_STATUS_INVALID_ARGUMENTS;
    if (v < 0)
        return DMI_STATUS_VDEV_NOT_EXIST;
    if (!(busy = fl_get(V "busy", v)))
        return DMI_STATUS_NOT_SUPPORTED;
    *busy_percent = atoi(busy);
    return DMI_STATUS_SUCCESS;
}
