/* safetensors.h — model weights from .safetensors files through mmap, one
 * file or a sharded checkpoint (model.safetensors.index.json).
 *
 * Format: 8-byte little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]},
 *  "__metadata__": {...}}, then the data; offsets are relative to the end of
 * the header. Every field is checked at open: offsets inside the file,
 * end - begin == elements x dtype size, no two tensors overlapping, known
 * dtype; a truncated or lying file gets an error naming the file and the
 * tensor, never a crash. */
#ifndef TB_ENGINE_SAFETENSORS_H
#define TB_ENGINE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef enum tb_dtype {
    TB_DT_F32 = 1,
    TB_DT_F16 = 2,
    TB_DT_BF16 = 3,
} tb_dtype;

size_t tb_dtype_size(tb_dtype dt);
const char *tb_dtype_name(tb_dtype dt); /* "F32", "F16", "BF16" */

#define TB_MAX_DIMS 4

typedef struct tb_tensor {
    char *name;
    tb_dtype dtype;
    int ndim;
    int64_t shape[TB_MAX_DIMS];
    int64_t n_elements;
    const void *data;  /* inside the mapping, read-only; may be unaligned
                          (the header length is free), so read it with
                          memcpy or tb_to_f32 */
    size_t n_bytes;
    const char *file;  /* the file holding it */
} tb_tensor;

typedef struct tb_weights tb_weights; /* opaque: mappings + tensor table */

/* Open a model folder: model.safetensors.index.json if present (every
 * shard it names, every tensor in the shard it says), else
 * model.safetensors. Returns 0 or -1 with an error naming file and tensor. */
int tb_weights_open(const char *model_dir, tb_weights **out, char *err, size_t err_size);
/* Open one .safetensors file. */
int tb_weights_open_file(const char *path, tb_weights **out, char *err, size_t err_size);
/* The same checks on a file's bytes already in memory (tests, fuzzing):
 * buf is not copied and must outlive the weights; `name` stands for the
 * file in errors and in tb_tensor.file. */
int tb_weights_open_memory(const void *buf, size_t len, const char *name, tb_weights **out,
                           char *err, size_t err_size);
void tb_weights_close(tb_weights *w);

size_t tb_weights_count(const tb_weights *w);
/* i < count; tensors in name order. */
const tb_tensor *tb_weights_at(const tb_weights *w, size_t i);
/* NULL when absent. */
const tb_tensor *tb_weights_find(const tb_weights *w, const char *name);

/* Check that tensor `name` exists with exactly this shape (ndim dims);
 * -1 with "FILE: tensor NAME: shape [a, b], expected [c, d]" otherwise. */
int tb_weights_expect(const tb_weights *w, const char *name, int ndim, const int64_t *shape,
                      char *err, size_t err_size);

/* Convert n elements of dtype dt at src to float32. */
void tb_to_f32(tb_dtype dt, const void *src, float *dst, size_t n);

/* float32 ↔ bfloat16 (round to nearest even) and float16 helpers. */
uint16_t tb_f32_to_bf16(float f);
float tb_bf16_to_f32(uint16_t h);
float tb_f16_to_f32(uint16_t h);

#endif
