/*
 * Our declarations of the part of Hygon's ROCm SMI fork (librocm_smi64.so, "rocm_smi" 7.6.0 +
 * HY 0.6 as shipped in /opt/hyhal) that the hygon backend calls. Written by this project from
 * the facts of Hygon's public rocm_smi.h (HYGON-AI/hcu-dcgm, pkg/dcgm/include/, NCSA): the
 * sequential status enum, the process structs (the v2 one is Hygon's own, VRAM in MiB), the
 * 64-bit GPU-block enum, CU_OCCUPANCY_INVALID. Only what we use is declared; the fake library
 * (fake_rsmi.c) implements it and tests assert vendors/_hygon_lib.py against it with gcc.
 */
#ifndef HYGON_RSMI_H
#define HYGON_RSMI_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    RSMI_STATUS_SUCCESS = 0,
    RSMI_STATUS_INVALID_ARGS,
    RSMI_STATUS_NOT_SUPPORTED,
    RSMI_STATUS_FILE_ERROR,
    RSMI_STATUS_PERMISSION,
    RSMI_STATUS_OUT_OF_RESOURCES,
    RSMI_STATUS_INTERNAL_EXCEPTION,
    RSMI_STATUS_INPUT_OUT_OF_BOUNDS,
    RSMI_STATUS_INIT_ERROR,
    RSMI_STATUS_NOT_YET_IMPLEMENTED,
    RSMI_STATUS_NOT_FOUND,
    RSMI_STATUS_INSUFFICIENT_SIZE,
    RSMI_STATUS_INTERRUPT,
    RSMI_STATUS_UNEXPECTED_SIZE,
    RSMI_STATUS_NO_DATA,
    RSMI_STATUS_UNEXPECTED_DATA,
    RSMI_STATUS_BUSY,
    RSMI_STATUS_REFCOUNT_OVERFLOW,
    RSMI_STATUS_SETTING_UNAVAILABLE,
    RSMI_STATUS_AMDGPU_RESTART_ERR,
    RSMI_STATUS_UNKNOWN_ERROR = 0xFFFFFFFF
} rsmi_status_t;

typedef enum { RSMI_MEM_TYPE_VRAM = 0, RSMI_MEM_TYPE_VIS_VRAM, RSMI_MEM_TYPE_GTT } rsmi_memory_type_t;

typedef enum { RSMI_TEMP_TYPE_EDGE = 0, RSMI_TEMP_TYPE_JUNCTION, RSMI_TEMP_TYPE_MEMORY } rsmi_temperature_type_t;

typedef enum { RSMI_TEMP_CURRENT = 0 } rsmi_temperature_metric_t;

typedef enum {
    RSMI_AVERAGE_POWER = 0,
    RSMI_CURRENT_POWER,
    RSMI_INVALID_POWER = 0xFFFFFFFF
} RSMI_POWER_TYPE;

typedef enum { RSMI_SW_COMP_DRIVER = 0 } rsmi_sw_component_t;

/* The kind of link between two devices, as upstream ROCm SMI numbers it; Hygon's tools name
 * the XGMI value HSL. */
typedef enum {
    RSMI_IOLINK_TYPE_UNDEFINED = 0,
    RSMI_IOLINK_TYPE_PCIEXPRESS,
    RSMI_IOLINK_TYPE_XGMI,
    RSMI_IOLINK_TYPE_NUMIOLINKTYPES,
    RSMI_IOLINK_TYPE_SIZE = 0xFFFFFFFF
} RSMI_IO_LINK_TYPE;

/* A 64-bit enum: the highest block bit is 1 << 63, so the argument is passed as 8 bytes. */
typedef enum {
    RSMI_GPU_BLOCK_INVALID = 0x0ULL,
    RSMI_GPU_BLOCK_UMC = 0x1ULL,
    RSMI_GPU_BLOCK_RESERVED = 0x8000000000000000ULL
} rsmi_gpu_block_t;

/* Hygon's error counts carry a deferred count and reserved room after upstream's two. */
typedef struct {
    uint64_t correctable_err;
    uint64_t uncorrectable_err;
    uint64_t deferred_err;
    uint64_t reserved[5];
} rsmi_error_count_t;

/* One process: VRAM in bytes, SDMA time in microseconds, CU use in percent of the card
 * (CU_OCCUPANCY_INVALID where the kernel does not provide it). */
typedef struct {
    uint32_t process_id;
    uint32_t pasid;
    uint64_t vram_usage;
    uint64_t sdma_usage;
    uint32_t cu_occupancy;
} rsmi_process_info_t;

/* Hygon's own per-process struct: VRAM in MiB for the whole process, a usage rate per GPU. */
typedef struct {
    uint32_t processId;
    uint64_t vramUsageSize;
    float vramUsageRate;
    int usedGpus;
    int gpuIndex[16];
    float gpuUsageRate[16];
} rsmi_process_info_v2_t;

#define CU_OCCUPANCY_INVALID 0xFFFFFFFF

/* The card's health figures (issue 29). Clock domains: the system (graphics) clock first, the
 * memory clock fifth; a domain's frequencies in Hz, the current one by its index (-1, all
 * ones, when none is current). Hygon's fork carries upstream's newer struct, with the deep
 * sleep flag first and room for 33 frequencies. */
typedef enum {
    RSMI_CLK_TYPE_SYS = 0x0,
    RSMI_CLK_TYPE_DF,
    RSMI_CLK_TYPE_DCEF,
    RSMI_CLK_TYPE_SOC,
    RSMI_CLK_TYPE_MEM,
    RSMI_CLK_TYPE_PCIE
} rsmi_clk_type_t;

#define RSMI_MAX_NUM_FREQUENCIES 33

typedef struct {
    _Bool has_deep_sleep;
    uint32_t num_supported;
    uint32_t current;
    uint64_t frequency[RSMI_MAX_NUM_FREQUENCIES];
} rsmi_frequencies_t;

/* A retired (bad) memory page and its state. */
typedef enum {
    RSMI_MEM_PAGE_STATUS_RESERVED = 0,
    RSMI_MEM_PAGE_STATUS_PENDING,
    RSMI_MEM_PAGE_STATUS_UNRESERVABLE
} rsmi_memory_page_status_t;

typedef struct {
    uint64_t page_address;
    uint64_t page_size;
    rsmi_memory_page_status_t status;
} rsmi_retired_page_record_t;

rsmi_status_t rsmi_init(uint64_t init_flags);
rsmi_status_t rsmi_shut_down(void);
rsmi_status_t rsmi_num_monitor_devices(uint32_t *num_devices);
rsmi_status_t rsmi_version_str_get(rsmi_sw_component_t component, char *ver_str, uint32_t len);
rsmi_status_t rsmi_dev_unique_id_get(uint32_t dv_ind, uint64_t *id);
rsmi_status_t rsmi_dev_pci_id_get(uint32_t dv_ind, uint64_t *bdfid);
rsmi_status_t rsmi_dev_name_get(uint32_t dv_ind, char *name, size_t len);
rsmi_status_t rsmi_dev_serial_number_get(uint32_t dv_ind, char *serial_num, uint32_t len);
rsmi_status_t rsmi_dev_memory_total_get(uint32_t dv_ind, rsmi_memory_type_t mem_type,
                                        uint64_t *total);
rsmi_status_t rsmi_dev_memory_usage_get(uint32_t dv_ind, rsmi_memory_type_t mem_type,
                                        uint64_t *used);
rsmi_status_t rsmi_dev_busy_percent_get(uint32_t dv_ind, uint32_t *busy_percent);
rsmi_status_t rsmi_dev_memory_busy_percent_get(uint32_t dv_ind, uint32_t *busy_percent);
rsmi_status_t rsmi_dev_temp_metric_get(uint32_t dv_ind, uint32_t sensor_type,
                                       rsmi_temperature_metric_t metric, int64_t *temperature);
rsmi_status_t rsmi_dev_power_get(uint32_t dv_ind, uint64_t *power, RSMI_POWER_TYPE *type);
rsmi_status_t rsmi_dev_power_ave_get(uint32_t dv_ind, uint32_t sensor_ind, uint64_t *power);
rsmi_status_t rsmi_dev_ecc_count_get(uint32_t dv_ind, rsmi_gpu_block_t block,
                                     rsmi_error_count_t *ec);
rsmi_status_t rsmi_dev_energy_count_get(uint32_t dv_ind, uint64_t *power, float *counter_resolution,
                                        uint64_t *timestamp);
rsmi_status_t rsmi_dev_gpu_clk_freq_get(uint32_t dv_ind, rsmi_clk_type_t clk_type,
                                        rsmi_frequencies_t *f);
rsmi_status_t rsmi_dev_pci_replay_counter_get(uint32_t dv_ind, uint64_t *counter);
rsmi_status_t rsmi_dev_memory_reserved_pages_get(uint32_t dv_ind, uint32_t *num_pages,
                                                 rsmi_retired_page_record_t *records);
rsmi_status_t rsmi_topo_get_numa_node_number(uint32_t dv_ind, uint32_t *numa_node);
rsmi_status_t rsmi_topo_get_link_type(uint32_t dv_ind_src, uint32_t dv_ind_dst, uint64_t *hops,
                                      RSMI_IO_LINK_TYPE *type);
rsmi_status_t rsmi_compute_process_info_get(rsmi_process_info_t *procs, uint32_t *num_items);
rsmi_status_t rsmi_compute_process_gpus_get(uint32_t pid, uint32_t *dv_indices,
                                            uint32_t *num_devices);
rsmi_status_t rsmi_compute_process_info_by_device_get(uint32_t pid, uint32_t dv_ind,
                                                      rsmi_process_info_t *proc);
rsmi_status_t rsmi_compute_process_info_by_pid_get_v2(uint32_t pid,
                                                      rsmi_process_info_v2_t *proc);

#endif
