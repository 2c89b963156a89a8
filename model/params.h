/*
 * model/params.h - GPT-2 parameter layout, TP sharding, init, load and save.
 *
 * The 16 tensors are in llm.c's order (so its model files load unchanged):
 *   wte[Vp,C] wpe[maxT,C] ln1w[L,C] ln1b[L,C] qkvw[L,3C,C] qkvb[L,3C]
 *   attprojw[L,C,C] attprojb[L,C] ln2w[L,C] ln2b[L,C] fcw[L,4C,C] fcb[L,4C]
 *   fcprojw[L,C,4C] fcprojb[L,C] lnfw[C] lnfb[C]
 *
 * Under TP degree P, rank r holds (Megatron-LM's scheme; docs/ARCHITECTURE.md):
 *   wte       rows [r*Vp/P, (r+1)*Vp/P)            (vocab-parallel)
 *   qkvw/qkvb the q, k and v rows of heads [r*NH/P, (r+1)*NH/P)  (column-parallel)
 *   attprojw  input columns of those heads         (row-parallel)
 *   fcw/fcb   rows [r*4C/P, (r+1)*4C/P)            (column-parallel)
 *   fcprojw   input columns [r*4C/P, (r+1)*4C/P)   (row-parallel)
 *   the rest  replicated (wpe, LayerNorms, attprojb, fcprojb)
 * Every shard is described as a list of rectangular blocks of the full
 * tensor (ShardBlock, below), and every slicer walks that one list: the host
 * copy routine that slices a full model (init, load) and assembles one from
 * shards (save), and the device slicer of model/init_cuda.cu.
 */
#ifndef PARAMS_H
#define PARAMS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The tensor slots of a layout: GPT-2 uses all 16, Qwen2 the first 10 (the
 * rest are empty: zero elements, so loops over every slot stay correct). */
#define NUM_PARAM_TENSORS 16
enum { P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
       P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB };

/* Qwen2 (transformers' Qwen2ForCausalLM), H = NH*hs, KH = KV*hs, F = d_ff:
 *   wte[Vp,C] ln1w[L,C] qkvw[L,H+2KH,C] (q rows, k rows, v rows) qkvb[L,H+2KH]
 *   oprojw[L,C,H] ln2w[L,C] gateupw[L,2F,C] (gate rows, then up rows)
 *   downw[L,C,F] normw[C] lmhead[Vp,C] (empty when tied to wte)
 * Under TP, qkvw/qkvb hold the q rows of heads [r*NH/P, ..) and the k and v
 * rows of kv heads [r*KV/P, ..) (Megatron's query groups), gateupw the gate
 * and up rows [r*F/P, ..), oprojw and downw the matching input columns, wte
 * and lmhead vocab rows; the norms are replicated. */
enum { Q_WTE, Q_LN1W, Q_QKVW, Q_QKVB, Q_OPROJW, Q_LN2W, Q_GATEUPW, Q_DOWNW, Q_NORMW, Q_LMHEAD, Q_NUM };

enum { ARCH_GPT2 = 0, ARCH_QWEN2 = 1 };

typedef struct {
    int maxT, V, Vp, L, NH, C;  /* full model: V real vocab, Vp padded */
    /* zero for GPT-2 (so a GPTShape written as {maxT, V, Vp, L, NH, C} is one) */
    int arch;                   /* ARCH_GPT2 | ARCH_QWEN2 */
    int KV, F, tied;            /* qwen2: kv heads, MLP width, LM head tied to wte */
    float norm_eps, rope_theta; /* qwen2: RMSNorm eps, RoPE base */
} GPTShape;

/* A GPT-2 shape (the qwen2 fields zero) */
static inline GPTShape gpt2_shape(int maxT, int V, int Vp, int L, int NH, int C) {
    GPTShape s = {maxT, V, Vp, L, NH, C, ARCH_GPT2, 0, 0, 1, 1e-5f, 0.0f};
    return s;
}

/* kv heads and MLP width of any shape (GPT-2: NH and 4C) */
static inline int shape_kv(const GPTShape* s) { return s->arch == ARCH_QWEN2 ? s->KV : s->NH; }
static inline int shape_ffn(const GPTShape* s) { return s->arch == ARCH_QWEN2 ? s->F : 4 * s->C; }

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
/* Vocab padded to a multiple of 128 and of P; -1 when that exceeds INT_MAX. */
int params_padded_vocab(int V, int P);
void params_layout(ParamLayout* pl, GPTShape s, int P, int r);
/* Checks that every size derived from the shape (at TP degree P, batch B x
 * T) fits the int and size_t arithmetic of params.c and gpt.c, before any
 * of it is computed: 0, or -1 with one line in err naming the key. */
int params_shape_check(GPTShape s, int P, int B, int T, char* err, size_t errlen);
extern const char* PARAM_NAMES[NUM_PARAM_TENSORS];   /* GPT-2's */
/* the name of slot t in pl's architecture ("" for an unused slot) */
const char* params_tensor_name(const ParamLayout* pl, int t);
/* 1 if tensor t has one block per layer (named "layer l" in messages) */
int params_tensor_layered(const ParamLayout* pl, int t);

/* One rectangular block of this rank's shard of tensor t: `rows` x `cols`
 * values starting at element `src` of the full tensor t (row pitch `ld`
 * elements), stored row after row at element `dst` of the shard (that is,
 * at local + pl->offset[t] + dst in the flat shard buffer). The blocks
 * 0..params_shard_nblocks(pl, t)-1 tile the shard in storage order. */
typedef struct {
    size_t src, ld, dst;
    int rows, cols;
} ShardBlock;
int params_shard_nblocks(const ParamLayout* pl, int t);
ShardBlock params_shard_block(const ParamLayout* pl, int t, int i);

/* Copy between a full model (llm.c layout, fp32, host) and this rank's
 * shards (flat, fp32, host). to_local=1 slices; 0 writes the shard into full. */
void params_copy_shard(const ParamLayout* pl, float* full, float* local, int to_local);

/* GPT-2's init rule for tensor t, shared by the host and the device init:
 * returns the std of its N(0, std) values (0.02; 0.02/sqrt(2L) for the
 * residual projections attprojw and fcprojw), or 0 for a constant tensor,
 * whose value goes to *fill (1 for LayerNorm gains, 0 for biases). On top of
 * the rule, wte's padding rows V..Vp-1 are zero. */
float params_init_std(const ParamLayout* pl, int t, float* fill);

/* Full fp32 model initialised from seed by that rule on the host. Each value
 * depends only on (seed, tensor, index) through a counter hash, so any TP
 * degree slices identical weights. Returns malloc'd floats. The device init
 * (model/init_cuda.h) draws other values from the same distributions. */
float* params_init_full(const ParamLayout* pl, unsigned long long seed);

/* llm.c model file (magic 20240326, version 3, fp32). Our writer adds a
 * CRC-32C of the whole file in header ints 8 (a tag) and 9, which llm.c's
 * loader ignores. Read: checks the shape against pl and names the first field
 * that differs (the file's padded vocab may differ from ours: rows are
 * re-padded), verifies the checksum when the file has one (*checked = 1; 0
 * for files without, e.g. written by llm.c), and refuses a non-finite weight
 * naming its tensor. Returns 0 with the malloc'd full model in *out, or -1
 * with one line in err naming the file. */
int params_read_full(const char* path, const ParamLayout* pl, float** out, int* checked, char* err, size_t errlen);
/* Validates a model file's header and size against the shape without reading
 * the weights: 0 ok, or -1 with one line in err ("error: ...") naming the
 * file and the first field that differs. */
/* The first non-finite value of a full model as "tensor NAME, layer l,
 * element i (value)" in where: 1 if there is one, 0 when all are finite. */
int params_first_nonfinite(const ParamLayout* pl, const float* full, char* where, size_t cap);
int params_file_check(const char* path, const ParamLayout* pl, char* err, size_t errlen);
/* Writes the full model atomically (path.tmp, fsync, rename), with its
 * checksum. Returns 0, or -1 with one line in err; a failed write leaves no
 * file behind (neither the .tmp nor a partial path). */
int params_save_full(const char* path, const ParamLayout* pl, const float* full, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* PARAMS_H */
