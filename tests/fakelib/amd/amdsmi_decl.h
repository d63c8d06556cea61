/*
 * Our declarations of the part of AMD SMI (libamd_smi.so) the fake implements, written by this
 * project from the facts of the public header ROCm/amdsmi include/amd_smi/amdsmi.h (MIT) and of
 * the ROCm 7.0 layouts the `amdsmi` wheel 7.0.2 binds (its amdsmi_wrapper.py is the ABI the
 * Python side reads). Not a copy: only the types, fields and values the fake needs, with
 * natural C alignment. tests/vendors/test_amd_kit.py asserts every struct here against the
 * wheel's ctypes definitions (size and field offsets).
 */
#ifndef DEVICEMANAGER_AMDSMI_DECL_H
#define DEVICEMANAGER_AMDSMI_DECL_H

#include <stddef.h>
#include <stdint.h>

/* amdsmi_status_t */
typedef uint32_t amdsmi_status_t;
#define AMDSMI_STATUS_SUCCESS 0u
#define AMDSMI_STATUS_INVAL 1u
#define AMDSMI_STATUS_NOT_SUPPORTED 2u
#define AMDSMI_STATUS_NO_PERM 10u
#define AMDSMI_STATUS_OUT_OF_RESOURCES 15u
#define AMDSMI_STATUS_INIT_ERROR 18u
#define AMDSMI_STATUS_NOT_FOUND 31u
#define AMDSMI_STATUS_NOT_INIT 32u
#define AMDSMI_STATUS_DRIVER_NOT_LOADED 34u
#define AMDSMI_STATUS_INSUFFICIENT_SIZE 41u

/* amdsmi_temperature_type_t / amdsmi_temperature_metric_t: the values the fake answers */
#define AMDSMI_TEMPERATURE_TYPE_EDGE 0u
#define AMDSMI_TEMPERATURE_TYPE_HOTSPOT 1u
#define AMDSMI_TEMP_CURRENT 0u

#define AMDSMI_STRING_LENGTH 256 /* AMDSMI_MAX_STRING_LENGTH / AMDSMI_NORMAL_STRING_LENGTH */

typedef void *amdsmi_socket_handle;
typedef void *amdsmi_processor_handle;

typedef union {
    struct {
        uint64_t function_number : 3;
        uint64_t device_number : 5;
        uint64_t bus_number : 8;
        uint64_t domain_number : 48;
    } fields;
    uint64_t as_uint;
} amdsmi_bdf_t;

typedef struct {
    char market_name[AMDSMI_STRING_LENGTH];
    uint32_t vendor_id;
    char vendor_name[AMDSMI_STRING_LENGTH];
    uint32_t subvendor_id;
    uint64_t device_id;
    uint32_t rev_id;
    char asic_serial[AMDSMI_STRING_LENGTH]; /* hex digits, no 0x: the wheel adds it */
    uint32_t oam_id;
    uint32_t num_of_compute_units;
    uint64_t target_graphics_version;
    uint32_t subsystem_id;
    uint32_t reserved[21];
} amdsmi_asic_info_t;

typedef struct {
    uint64_t kfd_id;
    uint32_t node_id;
    uint32_t current_partition_id;
    uint32_t reserved[12];
} amdsmi_kfd_info_t;

typedef struct {
    uint32_t drm_render; /* render node minor, e.g. 128 */
    uint32_t drm_card;
    uint32_t hsa_id;
    uint32_t hip_id;
    char hip_uuid[AMDSMI_STRING_LENGTH];
} amdsmi_enumeration_info_t;

typedef struct {
    uint32_t vram_total; /* MiB */
    uint32_t vram_used;  /* MiB */
    uint32_t reserved[2];
} amdsmi_vram_usage_t;

typedef struct {
    uint32_t gfx_activity; /* percent; 0xFFFF: not available */
    uint32_t umc_activity;
    uint32_t mm_activity;
    uint32_t reserved[13];
} amdsmi_engine_usage_t;

typedef struct {
    uint64_t socket_power;
    uint32_t current_socket_power; /* W; 0xFFFF: not available */
    uint32_t average_socket_power; /* W; 0xFFFF: not available */
    uint64_t gfx_voltage;
    uint64_t soc_voltage;
    uint64_t mem_voltage;
    uint32_t power_limit;
    uint64_t reserved[18];
} amdsmi_power_info_t;

typedef struct {
    char driver_version[AMDSMI_STRING_LENGTH];
    char driver_date[AMDSMI_STRING_LENGTH];
    char driver_name[AMDSMI_STRING_LENGTH];
} amdsmi_driver_info_t;

typedef struct {
    uint64_t correctable_count;
    uint64_t uncorrectable_count;
    uint64_t deferred_count;
    uint64_t reserved[5];
} amdsmi_error_count_t;

typedef struct {
    uint32_t clk; /* MHz */
    uint32_t min_clk;
    uint32_t max_clk;
    uint8_t clk_locked;
    uint8_t clk_deep_sleep;
    uint32_t reserved[4];
} amdsmi_clk_info_t;

/* amdsmi_clk_type_t: the values the fake answers */
#define AMDSMI_CLK_TYPE_GFX 0u
#define AMDSMI_CLK_TYPE_MEM 4u

typedef struct {
    uint32_t major;
    uint32_t minor;
    uint32_t release;
    const char *build;
} amdsmi_version_t;

typedef struct {
    char name[AMDSMI_STRING_LENGTH];
    uint32_t pid;
    uint64_t mem; /* bytes */
    struct {
        uint64_t gfx; /* cumulative ns on the engine */
        uint64_t enc;
        uint32_t reserved[12];
    } engine_usage;
    struct {
        uint64_t gtt_mem; /* bytes */
        uint64_t cpu_mem;
        uint64_t vram_mem;
        uint32_t reserved[10];
    } memory_usage;
    char container_name[AMDSMI_STRING_LENGTH];
    uint32_t cu_occupancy; /* CUs in use; 0xFFFFFFFF: not available */
    uint32_t reserved[11];
} amdsmi_proc_info_t;

amdsmi_status_t amdsmi_init(uint64_t init_flags);
amdsmi_status_t amdsmi_shut_down(void);
amdsmi_status_t amdsmi_get_lib_version(amdsmi_version_t *version);
amdsmi_status_t amdsmi_get_socket_handles(uint32_t *count, amdsmi_socket_handle *handles);
amdsmi_status_t amdsmi_get_socket_info(amdsmi_socket_handle handle, size_t len, char *name);
amdsmi_status_t amdsmi_get_processor_handles(amdsmi_socket_handle socket, uint32_t *count,
                                             amdsmi_processor_handle *handles);
amdsmi_status_t amdsmi_get_gpu_device_uuid(amdsmi_processor_handle h, uint32_t *len, char *uuid);
amdsmi_status_t amdsmi_get_gpu_device_bdf(amdsmi_processor_handle h, amdsmi_bdf_t *bdf);
amdsmi_status_t amdsmi_get_gpu_bdf_id(amdsmi_processor_handle h, uint64_t *bdfid);
amdsmi_status_t amdsmi_get_gpu_asic_info(amdsmi_processor_handle h, amdsmi_asic_info_t *info);
amdsmi_status_t amdsmi_get_gpu_kfd_info(amdsmi_processor_handle h, amdsmi_kfd_info_t *info);
amdsmi_status_t amdsmi_get_gpu_enumeration_info(amdsmi_processor_handle h,
                                                amdsmi_enumeration_info_t *info);
amdsmi_status_t amdsmi_get_gpu_compute_partition(amdsmi_processor_handle h, char *partition,
                                                 uint32_t len);
amdsmi_status_t amdsmi_get_gpu_vram_usage(amdsmi_processor_handle h, amdsmi_vram_usage_t *usage);
amdsmi_status_t amdsmi_get_gpu_activity(amdsmi_processor_handle h, amdsmi_engine_usage_t *usage);
amdsmi_status_t amdsmi_get_power_info(amdsmi_processor_handle h, amdsmi_power_info_t *info);
amdsmi_status_t amdsmi_get_temp_metric(amdsmi_processor_handle h, uint32_t sensor, uint32_t metric,
                                       int64_t *temperature);
amdsmi_status_t amdsmi_get_gpu_driver_info(amdsmi_processor_handle h, amdsmi_driver_info_t *info);
amdsmi_status_t amdsmi_get_gpu_total_ecc_count(amdsmi_processor_handle h,
                                               amdsmi_error_count_t *count);
amdsmi_status_t amdsmi_get_energy_count(amdsmi_processor_handle h, uint64_t *energy_accumulator,
                                        float *counter_resolution, uint64_t *timestamp);
amdsmi_status_t amdsmi_get_clock_info(amdsmi_processor_handle h, uint32_t clk_type,
                                      amdsmi_clk_info_t *info);
amdsmi_status_t amdsmi_get_gpu_pci_replay_counter(amdsmi_processor_handle h, uint64_t *counter);

/* ECC per block, bad pages and throttling (issue 29). amdsmi_gpu_block_t is one bit per block
 * (UMC 0x1, SDMA 0x2, GFX 0x4, MMHUB 0x8, ATHUB 0x10, PCIE_BIF 0x20, HDP 0x40, XGMI_WAFL 0x80,
 * DF 0x100, SMN 0x200, SEM 0x400, MP0 0x800, MP1 0x1000, FUSE 0x2000, MCA 0x4000, VCN 0x8000,
 * JPEG 0x10000, IH 0x20000, MPIO 0x40000), passed as a 64-bit value. */
typedef uint64_t amdsmi_gpu_block_t;
#define AMDSMI_GPU_BLOCK_COUNT 19

/* amdsmi_memory_page_status_t */
#define AMDSMI_MEM_PAGE_STATUS_RESERVED 0u
#define AMDSMI_MEM_PAGE_STATUS_PENDING 1u
#define AMDSMI_MEM_PAGE_STATUS_UNRESERVABLE 2u

typedef struct {
    uint64_t page_address;
    uint64_t page_size;
    uint32_t status; /* amdsmi_memory_page_status_t */
} amdsmi_retired_page_record_t;

/* The ROCm 7.0 layout (the wheel's): header fields, then the per-XCP arrays [8][8]. */
#define AMDSMI_VIOLATION_XCP 8
typedef struct {
    uint64_t reference_timestamp; /* µs */
    uint64_t violation_timestamp; /* ms */
    uint64_t acc_counter;
    uint64_t acc_prochot_thrm;
    uint64_t acc_ppt_pwr;
    uint64_t acc_socket_thrm;
    uint64_t acc_vr_thrm;
    uint64_t acc_hbm_thrm;
    uint64_t acc_gfx_clk_below_host_limit;
    uint64_t per_prochot_thrm; /* percent; UINT64_MAX: unsupported */
    uint64_t per_ppt_pwr;
    uint64_t per_socket_thrm;
    uint64_t per_vr_thrm;
    uint64_t per_hbm_thrm;
    uint64_t per_gfx_clk_below_host_limit;
    uint8_t active_prochot_thrm; /* 1 active, 0 not; UINT8_MAX: unsupported */
    uint8_t active_ppt_pwr;
    uint8_t active_socket_thrm;
    uint8_t active_vr_thrm;
    uint8_t active_hbm_thrm;
    uint8_t active_gfx_clk_below_host_limit;
    uint64_t acc_gfx_clk_below_host_limit_pwr[AMDSMI_VIOLATION_XCP][AMDSMI_VIOLATION_XCP];
    uint64_t acc_gfx_clk_below_host_limit_thm[AMDSMI_VIOLATION_XCP][AMDSMI_VIOLATION_XCP];
    uint64_t acc_low_utilization[AMDSMI_VIOLATION_XCP][AMDSMI_VIOLATION_XCP];
    uint64_t acc_gfx_clk_below_host_limit_total[AMDSMI_VIOLATION_XCP][AMDSMI_VIOLATION_XCP];
    uint64_t per_gfx_clk_below_host_limit_pwr[AMDSMI_VIOLATION_XCP][AMDSMI_VIOLATION_XCP];
    uint64_t per_gfx_clk_below_host_limit_thm[AMDSMI_VIOLATION_XCP][AMDSMI_VIOLATION_XCP];
    uint64_t per_low_utilization[AMDSMI_VIOLATION_XCP][AMDSMI_VIOLATION_XCP];
    uint64_t per_gfx_clk_below_host_limit_total[AMDSMI_VIOLATION_XCP][AMDSMI_VIOLATION_XCP];
    uint8_t active_gfx_clk_below_host_limit_pwr[AMDSMI_VIOLATION_XCP][AMDSMI_VIOLATION_XCP];
    uint8_t active_gfx_clk_below_host_limit_thm[AMDSMI_VIOLATION_XCP][AMDSMI_VIOLATION_XCP];
    uint8_t active_low_utilization[AMDSMI_VIOLATION_XCP][AMDSMI_VIOLATION_XCP];
    uint8_t active_gfx_clk_below_host_limit_total[AMDSMI_VIOLATION_XCP][AMDSMI_VIOLATION_XCP];
    uint64_t reserved[AMDSMI_VIOLATION_XCP][AMDSMI_VIOLATION_XCP];
    uint64_t reserved2[AMDSMI_VIOLATION_XCP][AMDSMI_VIOLATION_XCP];
    uint64_t reserved3[AMDSMI_VIOLATION_XCP][AMDSMI_VIOLATION_XCP];
} amdsmi_violation_status_t;

amdsmi_status_t amdsmi_get_gpu_ecc_enabled(amdsmi_processor_handle h, uint64_t *enabled_blocks);
amdsmi_status_t amdsmi_get_gpu_ecc_count(amdsmi_processor_handle h, amdsmi_gpu_block_t block,
                                         amdsmi_error_count_t *ec);
amdsmi_status_t amdsmi_get_gpu_bad_page_info(amdsmi_processor_handle h, uint32_t *num_pages,
                                             amdsmi_retired_page_record_t *info);
amdsmi_status_t amdsmi_get_violation_status(amdsmi_processor_handle h,
                                            amdsmi_violation_status_t *info);
/* Links and placement (R-X3). The link type is amdsmi_link_type_t (older headers:
 * amdsmi_io_link_type_t); both give PCIe as 1 and xGMI as 2. */
#define AMDSMI_LINK_TYPE_PCIE 1u
#define AMDSMI_LINK_TYPE_XGMI 2u
amdsmi_status_t amdsmi_topo_get_numa_node_number(amdsmi_processor_handle h, uint32_t *numa_node);
amdsmi_status_t amdsmi_topo_get_link_type(amdsmi_processor_handle src, amdsmi_processor_handle dst,
                                          uint64_t *hops, uint32_t *type);
amdsmi_status_t amdsmi_get_gpu_process_list(amdsmi_processor_handle h, uint32_t *max_processes,
                                            amdsmi_proc_info_t *list);

/* The GPU metrics table (amdsmi.h's amdsmi_gpu_metrics_t, the ROCm 7.0 layout the wheel binds:
 * metrics v1.8 with the per-XCP stats of v1.6 on). A field the firmware does not fill is its
 * type's maximum (0xFFFF, 0xFFFFFFFF, UINT64_MAX). */
#define AMDSMI_NUM_HBM_INSTANCES 4
#define AMDSMI_MAX_NUM_VCN 4
#define AMDSMI_MAX_NUM_XGMI_LINKS 8
#define AMDSMI_MAX_NUM_GFX_CLKS 8
#define AMDSMI_MAX_NUM_CLKS 4
#define AMDSMI_MAX_NUM_JPEG 32
#define AMDSMI_MAX_NUM_JPEG_ENG_V1 40
#define AMDSMI_MAX_NUM_XCC 8
#define AMDSMI_MAX_NUM_XCP 8

typedef struct {
    uint16_t structure_size;
    uint8_t format_revision;
    uint8_t content_revision;
} amd_metrics_table_header_t;

typedef struct {
    uint32_t gfx_busy_inst[AMDSMI_MAX_NUM_XCC]; /* each XCC's instantaneous GFX busy, % */
    uint16_t jpeg_busy[AMDSMI_MAX_NUM_JPEG_ENG_V1];
    uint16_t vcn_busy[AMDSMI_MAX_NUM_VCN];
    uint64_t gfx_busy_acc[AMDSMI_MAX_NUM_XCC];
    uint64_t gfx_below_host_limit_acc[AMDSMI_MAX_NUM_XCC];
    uint64_t gfx_below_host_limit_ppt_acc[AMDSMI_MAX_NUM_XCC];
    uint64_t gfx_below_host_limit_thm_acc[AMDSMI_MAX_NUM_XCC];
    uint64_t gfx_low_utilization_acc[AMDSMI_MAX_NUM_XCC];
    uint64_t gfx_below_host_limit_total_acc[AMDSMI_MAX_NUM_XCC];
} amdsmi_gpu_xcp_metrics_t;

typedef struct {
    amd_metrics_table_header_t common_header;
    uint16_t temperature_edge;
    uint16_t temperature_hotspot;
    uint16_t temperature_mem;
    uint16_t temperature_vrgfx;
    uint16_t temperature_vrsoc;
    uint16_t temperature_vrmem;
    uint16_t average_gfx_activity; /* % */
    uint16_t average_umc_activity; /* % */
    uint16_t average_mm_activity;  /* % */
    uint16_t average_socket_power;
    uint64_t energy_accumulator;
    uint64_t system_clock_counter;
    uint16_t average_gfxclk_frequency;
    uint16_t average_socclk_frequency;
    uint16_t average_uclk_frequency;
    uint16_t average_vclk0_frequency;
    uint16_t average_dclk0_frequency;
    uint16_t average_vclk1_frequency;
    uint16_t average_dclk1_frequency;
    uint16_t current_gfxclk;
    uint16_t current_socclk;
    uint16_t current_uclk;
    uint16_t current_vclk0;
    uint16_t current_dclk0;
    uint16_t current_vclk1;
    uint16_t current_dclk1;
    uint32_t throttle_status;
    uint16_t current_fan_speed;
    uint16_t pcie_link_width;
    uint16_t pcie_link_speed;
    uint32_t gfx_activity_acc;
    uint32_t mem_activity_acc;
    uint16_t temperature_hbm[AMDSMI_NUM_HBM_INSTANCES];
    uint64_t firmware_timestamp;
    uint16_t voltage_soc;
    uint16_t voltage_gfx;
    uint16_t voltage_mem;
    uint64_t indep_throttle_status;
    uint16_t current_socket_power;
    uint16_t vcn_activity[AMDSMI_MAX_NUM_VCN];
    uint32_t gfxclk_lock_status;
    uint16_t xgmi_link_width;
    uint16_t xgmi_link_speed;
    uint64_t pcie_bandwidth_acc;
    uint64_t pcie_bandwidth_inst;
    uint64_t pcie_l0_to_recov_count_acc;
    uint64_t pcie_replay_count_acc;
    uint64_t pcie_replay_rover_count_acc;
    uint64_t xgmi_read_data_acc[AMDSMI_MAX_NUM_XGMI_LINKS];
    uint64_t xgmi_write_data_acc[AMDSMI_MAX_NUM_XGMI_LINKS];
    uint16_t current_gfxclks[AMDSMI_MAX_NUM_GFX_CLKS];
    uint16_t current_socclks[AMDSMI_MAX_NUM_CLKS];
    uint16_t current_vclk0s[AMDSMI_MAX_NUM_CLKS];
    uint16_t current_dclk0s[AMDSMI_MAX_NUM_CLKS];
    uint16_t jpeg_activity[AMDSMI_MAX_NUM_JPEG];
    uint32_t pcie_nak_sent_count_acc;
    uint32_t pcie_nak_rcvd_count_acc;
    uint64_t accumulation_counter;
    uint64_t prochot_residency_acc;
    uint64_t ppt_residency_acc;
    uint64_t socket_thm_residency_acc;
    uint64_t vr_thm_residency_acc;
    uint64_t hbm_thm_residency_acc;
    uint16_t num_partition;
    amdsmi_gpu_xcp_metrics_t xcp_stats[AMDSMI_MAX_NUM_XCP];
    uint32_t pcie_lc_perf_other_end_recovery;
    uint64_t vram_max_bandwidth;
    uint16_t xgmi_link_status[AMDSMI_MAX_NUM_XGMI_LINKS];
} amdsmi_gpu_metrics_t;

amdsmi_status_t amdsmi_get_gpu_metrics_info(amdsmi_processor_handle h,
                                            amdsmi_gpu_metrics_t *metrics);

#endif
