/* \file canopy_c.h
 * \brief Canopy's C ABI over the design registry: list the designs, plan one for a graph bucket,
 * run it on caller-owned buffers (host or CUDA memory, described as DLPack describes tensors) on the
 * caller's stream, destroy it. What the Python package `canopy` calls through ctypes; usable from any
 * language with a C FFI. No C++ exception crosses it: every failure is a status code and a message.
 */
#ifndef CANOPY_C_H
#define CANOPY_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: FP8 KV pools (kv_dtype and numerics in canopy_plan_params, kv_scale in the run calls). */
#define CANOPY_C_ABI_VERSION 2
#define CANOPY_MAX_DIMS 4

/* Status of every call that can fail. BAD_INPUT and UNSUPPORTED leave every output untouched. */
enum canopy_status
{
  CANOPY_OK = 0,
  CANOPY_BAD_INPUT = 1,      /* the message names the buffer (or parameter) and the first bad index */
  CANOPY_UNSUPPORTED = 2,    /* the design cannot serve these bounds; the reason is the message */
  CANOPY_RUNTIME_FAILURE = 3 /* a CUDA or library failure after validation */
};

/* Where a tensor lives: DLPack's DLDeviceType values. */
enum canopy_device_type
{
  CANOPY_DEVICE_CPU = 1,
  CANOPY_DEVICE_CUDA = 2,
  CANOPY_DEVICE_CUDA_HOST = 3,   /* pinned host memory: host designs read it */
  CANOPY_DEVICE_CUDA_MANAGED = 13
};

/* Element type classes: DLPack's DLDataTypeCode values. */
enum canopy_dtype_code
{
  CANOPY_DTYPE_INT = 0,
  CANOPY_DTYPE_UINT = 1,
  CANOPY_DTYPE_FLOAT = 2,
  CANOPY_DTYPE_BFLOAT = 4,
  CANOPY_DTYPE_BOOL = 6,
  CANOPY_DTYPE_FLOAT8_E4M3FN = 10, /* DLPack 1.1's FP8 codes (8 bits): an FP8 pool may say its format */
  CANOPY_DTYPE_FLOAT8_E5M2 = 12
};

/* One caller-owned buffer, named as the batch names it (canopy_buffer_names). A buffer left out of
 * the list passed to run is absent (allowed only where the mask layout does not read it). */
typedef struct canopy_tensor
{
  char const *name;
  void *data;          /* address of element 0 (byte offsets already applied) */
  int32_t device_type; /* canopy_device_type */
  int32_t device_id;
  uint8_t dtype_code;  /* canopy_dtype_code */
  uint8_t dtype_bits;
  uint16_t dtype_lanes;
  int32_t ndim;        /* <= CANOPY_MAX_DIMS */
  int64_t shape[CANOPY_MAX_DIMS];
  int64_t strides[CANOPY_MAX_DIMS]; /* in elements */
  int32_t readonly;    /* nonzero: the producer forbids writes (an error for `out`) */
} canopy_tensor;

/* One design of this build. */
typedef struct canopy_design_info
{
  char name[64];
  char memory[8];      /* "host" or "cuda": where its buffers must live */
  int32_t runnable;    /* its memory is usable on this machine */
  int32_t experimental;
  char reason[512];    /* why not runnable, else "" */
} canopy_design_info;

/* The bounds and knobs of one plan (one graph bucket). */
typedef struct canopy_plan_params
{
  char const *design;
  int32_t heads;
  int32_t max_batch;
  int32_t max_tree;    /* max nodes of one request; 0 = max_nodes */
  int64_t max_nodes;   /* max sum of nodes over the batch */
  int64_t max_prefix;  /* max prefix tokens of one request */
  char const *mask;    /* "full", "tree" or "parents" */
  char const *workspace; /* "persistent", "per-call" or "grow" */
  int32_t nsplit;      /* prefix splits, 0 = the design chooses */
  int32_t device;      /* CUDA device of a CUDA design's buffers and workspace */
  /* The KV pool's storage (docs/design.md §8): NULL or "" = "bf16"; "fp8-e4m3", "fp8-e5m2" (uint8
   * [slots, 576], value = decode(byte) * kv_scale) or "fp8-e4m3-blockscaled" (uint8 [slots, 656]). */
  char const *kv_dtype;
  char const *numerics; /* NULL or "" = "dequant"; "fp8-mma" (fp8-e4m3 and fp8-e5m2 pools only) */
} canopy_plan_params;

typedef struct canopy_plan canopy_plan;

/* Flags of canopy_plan_run. */
enum canopy_run_flags
{
  /* Read the metadata values and validate them (offsets, slots, trees, the plan's max_tree and
   * max_prefix) before running. Host designs always do. For a CUDA design this copies the metadata
   * to the host and waits for the stream: not capturable. */
  CANOPY_RUN_VALIDATE_VALUES = 1
};

int canopy_abi_version(void);

/* Fills up to \p capacity infos; returns the number of designs in the build. */
int canopy_designs(canopy_design_info *infos, int capacity);

/* The buffer names in the batch's order (q, out, kv_pool and the metadata); returns their count. */
int canopy_buffer_names(char const **names, int capacity);

/* Plans a design: host work, workspace sizing (allocation for "persistent"). */
int canopy_plan_create(canopy_plan_params const *params, canopy_plan **plan, char *message, size_t message_len);

/* Runs the plan on \p tensors: checks every descriptor (presence, device, dtype, shape, strides,
 * sizes against the plan), then enqueues on \p stream (a cudaStream_t; NULL = the legacy default
 * stream) without a host sync unless CANOPY_RUN_VALIDATE_VALUES is set for a CUDA design.
 * \p kv_scale: the fp8-e4m3 / fp8-e5m2 pool's scale (finite and > 0); other pools ignore it. */
int canopy_plan_run(canopy_plan *plan, canopy_tensor const *tensors, int num_tensors, double sm_scale,
                    double kv_scale, void *stream, int flags, char *message, size_t message_len);

/* The kernel path of the last run, the prefix splits and workspace bytes, whether run is capturable. */
int canopy_plan_describe(canopy_plan const *plan, char *path, size_t path_len, int32_t *splits,
                         int64_t *workspace_bytes, int32_t *capture_safe);

/* Loads the design plugin at \p path (backends/canopy_Plugin.hpp) into this process: its designs join
 * canopy_designs and can be planned like the built-in ones. BAD_INPUT, naming the file, for a file that
 * does not load, is no Canopy plugin, was built against another plugin ABI version, or registers a
 * design name that exists already; nothing is registered then. Loading it again is a no-op. */
int canopy_load_plugin(char const *path, char *message, size_t message_len);

/* The plugin library design \p name came from ("" for a built-in design); returns 0, or BAD_INPUT for
 * an unknown name. */
int canopy_design_origin(char const *name, char *origin, size_t origin_len);

/* Frees the plan (NULL is fine). */
void canopy_plan_destroy(canopy_plan *plan);

/* One-shot: reads and validates the metadata (waiting for \p stream on a CUDA design), plans the design
 * for exactly this batch (on q's device, with the options `canopy check` uses, in \p numerics for a
 * \p kv_dtype pool: NULL or "" as in canopy_plan_params), runs it. */
int canopy_verify_attention(char const *design, char const *mask, char const *kv_dtype, char const *numerics,
                            canopy_tensor const *tensors, int num_tensors, double sm_scale, double kv_scale,
                            void *stream, char *message, size_t message_len);

#ifdef __cplusplus
}
#endif

#endif
