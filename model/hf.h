/*
 * model/hf.h - Hugging Face model directories: config.json + model.safetensors
 * (or model-0000k-of-0000n.safetensors with model.safetensors.index.json),
 * for model.arch "qwen2" (transformers' Qwen2ForCausalLM names) and "gpt2"
 * (GPT2LMHeadModel's; its Conv1D weights are stored [in, out], transposed
 * against our [out, in], and converted both ways).
 *
 * Reading: config.json must agree with our shape (one error names our key,
 * transformers' field and both values), every tensor must be there with its
 * shape, and every value finite; tensors load from F32, BF16 or F16. The
 * full model is assembled in a fresh buffer, so a failure leaves nothing
 * half-loaded. Writing (the checkpoints of a qwen2 run) puts config.json and
 * model.safetensors (checksummed) in DIR.tmp, then renames it to DIR.
 */
#ifndef HF_H
#define HF_H

#include <stddef.h>

#include "model/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if path is a directory */
int hf_is_dir(const char* path);
/* Reads a model directory into a malloc'd full model (our layout, padded
 * vocab rows zero) in *out: 0, or -1 with one line in err naming the file
 * and the tensor or field. *checked = 1 when every safetensors file carried
 * our checksum and matched it. */
int hf_read_dir(const char* dir, const ParamLayout* pl, float** out, int* checked, char* err, size_t errlen);
/* Writes the full model as a directory transformers opens (dtype code
 * ST_F32, ST_BF16 or ST_F16 of model/safetensors.h), atomically: 0, or -1
 * with err and nothing left behind. */
int hf_save_dir(const char* dir, const ParamLayout* pl, const float* full, int code, char* err, size_t errlen);
/* Removes DIR/config.json, DIR/model.safetensors (and their .tmp) and DIR. */
void hf_remove_dir(const char* dir);

#ifdef __cplusplus
}
#endif
#endif /* HF_H */
