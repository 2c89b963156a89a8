/*
 * model/params.h - GPT-2 parameter layout, TP sharding, init, load and save.
 *
 * The 16 tensors are in llm.c's order (so its model files load unchanged):
 *   wte[Vp,C] wpe[maxT,C] ln1w[L,C] ln1b[L,C] qkvw[L,3C,C] qkvb[L,3C]
 *   attprojw[L,C,C] attprojb[L,C] ln2w[L,C] ln2b[L,C] fcw[L,4C,C] fcb[L,4C]
 *   fcprojw[L,C,4C] fcprojb[L,C] lnfw[C] lnfb[C]
 *
 * Under TP degree P, rank r holds (Megatron's scheme, DESIGN.md section 4):
 *   wte       rows [r*Vp/P, (r+1)*Vp/P)            (vocab-parallel)
 *   qkvw/qkvb the q, k and v rows of heads [r*NH/P, (r+1)*NH/P)  (column-parallel)
 *   attprojw  input columns of those heads         (row-parallel)
 *   fcw/fcb   rows [r*4C/P, (r+1)*4C/P)            (column-parallel)
 *   fcprojw   input columns [r*4C/P, (r+1)*4C/P)   (row-parallel)
 *   the rest  replicated (wpe, LayerNorms, attprojb, fcprojb)
 * Every shard is described as a list of rectangular blocks of the full
 * tensor, and ONE copy routine uses that description both to slice a full
 * model (init, load) and to assemble one from shards (save).
 */
#ifndef PARAMS_H
#define PARAMS_H

#include <stddef.h>

#define NUM_PARAM_TENSORS 16
enum { P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
       P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB };

typedef struct {
    int maxT, V, Vp, L, NH, C;  /* full model: V real vocab, Vp padded */
} GPTShape;

typedef struct {
    GPTShape s;
    int P, r;                            /* TP degree and rank */
    size_t full[NUM_PARAM_TENSORS];      /* element counts of the full tensors */
    size_t local[NUM_PARAM_TENSORS];     /* element counts of this rank's shards */
    size_t offset[NUM_PARAM_TENSORS];    /* offsets of the shards in one flat buffer */
    size_t total;                        /* sum of local */
    int sharded[NUM_PARAM_TENSORS];      /* 1 if split across TP ranks */
    int decayed[NUM_PARAM_TENSORS];      /* 1 for 2-D weights (AdamW weight decay) */
} ParamLayout;

/* Number of parameters of the full model (padding rows included). */
size_t params_full_count(const ParamLayout* pl);
/* Vocab padded to a multiple of 128 and of P. */
int params_padded_vocab(int V, int P);
void params_layout(ParamLayout* pl, GPTShape s, int P, int r);
extern const char* PARAM_NAMES[NUM_PARAM_TENSORS];

/* Copy between a full model (llm.c layout, fp32, host) and this rank's
 * shards (flat, fp32, host). to_local=1 slices; 0 writes the shard into full. */
void params_copy_shard(const ParamLayout* pl, float* full, float* local, int to_local);

/* Full fp32 model initialised from seed, GPT-2 style: N(0, 0.02) weights,
 * residual projections scaled by 1/sqrt(2L), zero biases, unit LayerNorm
 * gains, zero padding rows. Each value depends only on (seed, tensor, index),
 * so any TP degree slices identical weights. Returns malloc'd floats. */
float* params_init_full(const ParamLayout* pl, unsigned long long seed);

/* llm.c model file (magic 20240326, version 3, fp32). Load checks the shape
 * against s and names the first field that differs; the file's padded vocab
 * may differ from ours (rows are re-padded). Returns malloc'd full model. */
float* params_load_full(const char* path, const ParamLayout* pl);
/* Validates a model file against the shape without loading it: 0 ok, or -1
 * with one line in err naming the file and the first field that differs. */
int params_file_check(const char* path, const ParamLayout* pl, char* err, size_t errlen);
/* Writes the full model atomically (path.tmp, then rename). */
void params_save_full(const char* path, const ParamLayout* pl, const float* full);

#endif /* PARAMS_H */
