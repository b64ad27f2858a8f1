/* kiln_model.h: the C ABI of a model exported by kiln (kiln/export.hpp, CMake kiln_add_model).
 *
 * A library built by kiln_add_model holds one compiled model: its forward computation with
 * its placeholders, inputs (fed at each call) and parameters (the model's weights, held by a
 * kiln_model instance). Tensors cross the ABI as kiln_tensor descriptors of the caller's
 * memory: inputs are read from it and outputs written into it without copies (memory not
 * aligned to the element size is copied through an aligned buffer).
 *
 * Every function that can fail returns KILN_OK (0) or an error code, and then
 * kiln_last_error() is a message that says what is wrong (per thread, valid until this thread's
 * next call). On failure nothing is written: no output, no parameter. A model may be run from
 * several threads at once; loading or setting its parameters must not overlap its runs.
 */
#ifndef KILN_MODEL_H
#define KILN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI's version: kiln_abi_version() of a library; a caller checks it against this value. */
#define KILN_ABI_VERSION 1

/* Element types (kiln::dtype's order). bool is one byte, 0 or 1; bf16 is the upper 16 bits of
 * an IEEE float. */
typedef enum kiln_dtype { KILN_BOOL = 0, KILN_I32 = 1, KILN_I64 = 2, KILN_BF16 = 3, KILN_F32 = 4, KILN_F64 = 5 } kiln_dtype;

typedef enum kiln_status {
  KILN_OK = 0,
  KILN_ERROR_ARGUMENT = 1, /* a null pointer, an unknown or repeated name, a wrong count */
  KILN_ERROR_SHAPE = 2,    /* a shape or strides that do not fit */
  KILN_ERROR_DTYPE = 3,    /* a dtype that is not the placeholder's */
  KILN_ERROR_FILE = 4,     /* a weights file that cannot be read, is malformed or does not match */
  KILN_ERROR_MEMORY = 5,   /* out of memory */
  KILN_ERROR_RUNTIME = 6   /* anything else (an index out of range in the data, ...) */
} kiln_status;

/* What kiln_model_info describes. */
typedef enum kiln_role { KILN_INPUT = 0, KILN_PARAM = 1, KILN_OUTPUT = 2 } kiln_role;

#define KILN_MAX_RANK 8

/* A tensor in the caller's memory. */
typedef struct kiln_tensor {
  const char* name;       /* the placeholder's name; outputs: ignored (they go by position) */
  int32_t dtype;          /* a kiln_dtype */
  int32_t rank;           /* 0 to KILN_MAX_RANK */
  const int64_t* shape;   /* rank extents */
  const int64_t* strides; /* rank strides in elements, not negative; NULL: contiguous */
  void* data;             /* the first element (may be NULL when there are no elements) */
} kiln_tensor;

typedef struct kiln_model kiln_model;

uint32_t kiln_abi_version(void);
/* This thread's last error message ("" if none). */
const char* kiln_last_error(void);
/* The model's placeholders and outputs as JSON: {"abi": 1, "inputs": [{"name": "x", "dtype":
 * "f32", "shape": [-1, 784]}, ...], "params": [...], "outputs": [...]} (a dyn extent is -1). */
const char* kiln_model_describe(void);
/* How many inputs, parameters or outputs the model has. */
size_t kiln_model_count(int32_t role);
/* The i-th of them: its name, dtype and declared shape (dyn extents -1; `shape` has room for
 * KILN_MAX_RANK). Any pointer may be NULL. */
int kiln_model_info(int32_t role, size_t i, const char** name, int32_t* dtype, int32_t* rank, int64_t* shape);

/* A model instance; its parameters start at zero. */
int kiln_model_create(kiln_model** model);
void kiln_model_destroy(kiln_model* model);
/* Reads every parameter from a safetensors file (names, dtypes and shapes must match; the
 * first mismatch is named). A kiln training checkpoint's other tensors (optimizer state) are
 * ignored. */
int kiln_model_load(kiln_model* model, const char* path);
/* The same from a whole safetensors file in memory (weights embedded in a program, say). */
int kiln_model_load_buffer(kiln_model* model, const void* data, size_t size);
/* Sets one parameter from the caller's memory (copied). */
int kiln_model_set_param(kiln_model* model, const kiln_tensor* value);
/* The shape that output `i` has for these inputs (`shape` has room for KILN_MAX_RANK). The
 * inputs' data are not read. */
int kiln_model_output_shape(const kiln_model* model, const kiln_tensor* inputs, size_t n_inputs, size_t i,
                            int32_t* rank, int64_t* shape);
/* Runs the model: every input once, by name, in any order; outputs by position, each of the
 * dtype and shape it has (kiln_model_output_shape), written in place. */
int kiln_model_run(const kiln_model* model, const kiln_tensor* inputs, size_t n_inputs, kiln_tensor* outputs,
                   size_t n_outputs);
/* The threads the CPU kernels use (at least 1); returns the previous count. */
int kiln_set_num_threads(int n);

#ifdef __cplusplus
}
#endif

#endif /* KILN_MODEL_H */
