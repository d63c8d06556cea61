/*
 * Our declarations of the part of libhydmi.so (Hygon's device management interface, vDCU)
 * that the hygon backend calls, written from the facts of Hygon's public dmi_error.h and
 * dmi_virtual.h (HYGON-AI/hcu-dcgm, pkg/dcgm/include/, Apache-2.0): the status codes we map,
 * the device-info struct (a 256-byte name, memory in bytes, the bound container, the physical
 * card's index), and the vDCU queries.
 */
#ifndef HYGON_DMI_H
#define HYGON_DMI_H

#include <stddef.h>
#include <stdint.h>

#define DMI_NAME_SIZE 256

typedef enum {
    DMI_STATUS_SUCCESS = 0,
    DMI_STATUS_ERROR = 1,
    DMI_STATUS_OPEN_MKFD_FAILED = 3,
    DMI_STATUS_NOT_SUPPORTED = 6,
    DMI_STATUS_INVALID_ARGUMENTS = 10,
    DMI_STATUS_DEVICE_NOT_SUPPORT = 14,
    DMI_STATUS_VDEV_NOT_EXIST = 15,
    DMI_STATUS_PERMISSION = 19,
    DMI_STATUS_NOT_FOUND = 23,
    DMI_STATUS_NOT_YET_IMPLEMENTED = 31,
    DMI_STATUS_UNKNOWN_ERROR = 32
} dmiStatus;

typedef struct {
    char name[DMI_NAME_SIZE];
    int compute_unit_count;
    size_t global_mem_size; /* bytes */
    size_t usage_mem_size;  /* bytes */
    uint64_t container_id;  /* the container bound to a virtual device */
    int device_id;          /* the physical card a virtual device is carved from */
} dmiDeviceInfo;

dmiStatus dmiGetDeviceCount(int *count);
dmiStatus dmiGetVDeviceCount(int *count);
dmiStatus dmiGetVDeviceInfo(int vdevice_id, dmiDeviceInfo *device_info);
dmiStatus dmiGetVDevBusyPercent(int vdevice_id, int *busy_percent);

#endif
