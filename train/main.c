/*
 * train/main.c - the trainer: mpirun -np N build/train CONFIG [--set key=value ...]
 *
 * One step: every DP rank reads its part of the global batch (the TP ranks
 * of a group read the same one) -> forward and backward through the sharded
 * model, with every TP exchange going through comm/ (and compress/ when
 * enabled) -> DP gradient averaging -> global grad-norm clip -> AdamW -> log.
 * Validation loss and a generated sample every eval_every steps; atomic
 * checkpoints every checkpoint.every steps.
 *
 * The host stages the batch and the step's scalars first (gpt_stage,
 * gpt_stage_step); the device part (train_step) then takes everything it
 * needs from backend memory and leaves the loss, the norm and the skip flag
 * there, so on one rank (or several on the NCCL backend) it queues without
 * a single wait for the device, and with train.cuda_graph it is captured
 * once, after a warm-up step, and replayed as one CUDA graph; steps whose
 * exchanges do host work run eagerly between replays (comm/step_graph.h).
 * The host reads the step's scalars once, after the step.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/sites.h"
#include "comm/step_graph.h"
#include "common/check.h"
#include "train/checkpoint.h"
#ifdef OPS_BF16
#include "comm/comm_nccl.h"
#endif
#include "data/shard.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "model/hf.h"
#include "ops/ops.h"
#include "train/config.h"
#include "train/log.h"
#include "train/agree.h"
#include "train/memcheck.h"
#include "train/signals.h"
#include "comm/watchdog.h"
#include "train/schedule.h"

static int local_rank(void) {
    MPI_Comm node;
    int r;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &r));
    MPI_CHECK(MPI_Comm_free(&node));
    return r;
}

static void usage(FILE* out) {
    fprintf(out,
            "usage: mpirun -np N build/train CONFIG.json [--set key=value ...]\n"
            "  CONFIG.json   the run's configuration (see configs/ and the README)\n"
            "  --set k=v     override any config key, e.g. --set train.lr=3e-4 --set compress.method=taco\n"
            "  N must equal parallel.tp * parallel.dp\n");
}

/* mean loss over eval_batches batches of the validation set */
static float evaluate(GPT* m, Comm* c, DataLoader* val, int batches, int* inputs, int* targets) {
    c->train_mode = 0;
    dataloader_reset(val);
    double sum = 0.0;
    for (int i = 0; i < batches; i++) {
        dataloader_next(val, inputs, targets);
        sum += gpt_forward(m, c, inputs, targets);
    }
    c->train_mode = 1;
    return (float)(comm_sum_double(c->dp_comm, sum / batches) / c->dp_size);
}

/* sample a token from logits[V] at temperature 1 with a counter-based draw */
static int sample_token(const float* logits, int V, unsigned long long key) {
    float mx = logits[0];
    for (int i = 1; i < V; i++) if (logits[i] > mx) mx = logits[i];
    double z = 0.0;
    for (int i = 0; i < V; i++) z += exp((double)logits[i] - mx);
    key ^= key >> 33; key *= 0xff51afd7ed558ccdULL; key ^= key >> 33; key *= 0xc4ceb9fe1a85ec53ULL; key ^= key >> 33;
    double u = (double)(key >> 11) / 9007199254740992.0 * z, acc = 0.0;
    for (int i = 0; i < V; i++) {
        acc += exp((double)logits[i] - mx);
        if (u < acc) return i;
    }
    return V - 1;
}

/* Generate cfg sample_len tokens after a prompt from the validation set and
 * print them on rank 0. Every TP rank draws the same token (same key). */
static void generate(GPT* m, Comm* c, const Config* cfg, const Tokenizer* tok, const int* prompt_src, int step) {
    int T = m->T, N = m->B * m->T, V = m->pl.s.V;
    int P = T < 16 ? T / 2 : 8;                         /* prompt length */
    int len = cfg->train.sample_len < T - P ? cfg->train.sample_len : T - P;
    int* ctx = callocCheck((size_t)N, sizeof(int));
    float* logits = mallocCheck((size_t)V * sizeof(float));
    memcpy(ctx, prompt_src, (size_t)P * sizeof(int));
    c->train_mode = 0;
    for (int i = 0; i < len; i++) {
        gpt_forward(m, c, ctx, NULL);
        gpt_logits_row(m, c, P + i - 1, logits);
        ctx[P + i] = sample_token(logits, V, ((unsigned long long)cfg->train.seed << 32) ^ ((unsigned long long)step << 12) ^ (unsigned)i);
    }
    c->train_mode = 1;
    if (c->world_rank == 0 && signals_stdout_ready()) {
        printf("---- sample at step %d: [", step);
        tokenizer_print(tok, ctx, P, stdout);
        printf("]");
        tokenizer_print(tok, ctx + P, len, stdout);
        printf("\n----\n");
        fflush(stdout);
    }
    free(ctx);
    free(logits);
}

/* The device part of one training step on the staged batch and scalars.
 * At world size 1 nothing in it waits for the device (the TP and DP
 * exchanges are no-ops there), which is what lets ops_graph_* capture it;
 * with more ranks the same holds for the NCCL backend (comm/step_graph.h),
 * and with MPI gpt_grad_clip waits once, for the cross-rank sums. */
static void train_step(GPT* m, Comm* c, const Config* cfg) {
    ops_from_host_async(m->step, m->step_host, sizeof(StepScalars));   /* lr and the bias corrections */
    gpt_forward_staged(m, c);
    gpt_zero_grad(m);
    gpt_backward(m, c);
    dp_allreduce_mean(c, m->grads, m->pl.total);
    gpt_grad_clip(m, c, cfg->train.grad_clip);
    gpt_update(m, cfg->train.beta1, cfg->train.beta2, cfg->train.eps, cfg->train.weight_decay);
    ops_to_host_async(m->step_host, m->step, sizeof(StepScalars));     /* loss, norm, skip, for after the sync */
}

int main(int argc, char** argv) {
    MPI_CHECK(MPI_Init(&argc, &argv));
    int world_rank;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
    char err[1024] = "";

    /* ---- arguments and config: validated before any work ---- */
    const char* cfg_path = NULL;
    char** sets = callocCheck((size_t)argc, sizeof(char*));
    int nsets = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            if (world_rank == 0) usage(stdout);
            MPI_Finalize();
            return 0;
        } else if (strcmp(argv[i], "--set") == 0 && i + 1 < argc) {
            sets[nsets++] = argv[++i];
        } else if (strncmp(argv[i], "--set=", 6) == 0) {
            sets[nsets++] = argv[i] + 6;
        } else if (argv[i][0] != '-' && !cfg_path) {
            cfg_path = argv[i];
        } else {
            snprintf(err, sizeof(err), "error: unexpected argument '%s' (try --help)", argv[i]);
            bad = 1;
        }
    }
    if (!bad && !cfg_path) { snprintf(err, sizeof(err), "error: no config file given (try --help)"); bad = 1; }
    agree_or_exit(bad, err, sizeof(err));
    Config cfg;
    int world_size;
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
    bad = config_load(&cfg, cfg_path, nsets, sets, err, sizeof(err)) != 0 ||
          config_check_world(&cfg, world_size, err, sizeof(err)) != 0;
    agree_or_exit(bad, err, sizeof(err));
    free(sets);
    wd_init(cfg.comm.timeout_s);
    signals_install();

    /* both output directories are probed before any work: an unwritable
     * checkpoint.dir must not be found at the first save, hours in. Every rank
     * probes checkpoint.dir (node-local disks) and rank 0 log.dir. */
    bad = log_probe_dir("checkpoint.dir", cfg.checkpoint.dir, world_rank, err, sizeof(err)) != 0 ||
          (world_rank == 0 && log_probe_dir("log.dir", cfg.log.dir, world_rank, err, sizeof(err)) != 0);
    agree_or_exit(bad, err, sizeof(err));

    Comm comm;
    comm_init(&comm, cfg.parallel.tp, cfg.parallel.dp);
    CommPolicy policy;
    config_comm_policy(&cfg, &policy);
    comm_setup_sites(&comm, cfg.model.n_layer, &policy);
    ops_init(local_rank());
#ifdef OPS_BF16
    if (strcmp(cfg.comm.backend, "nccl") == 0) { /* after ops_init: NCCL binds each rank to its current device
                                                    (the CPU build's config refuses "nccl") */
        bad = comm_nccl_init(&comm, err, sizeof(err)) != 0;
        agree_or_exit(bad, err, sizeof(err));
    }
#endif
    int B = cfg.train.batch_size, T = cfg.train.seq_len;

    /* ---- data ---- */
    DataLoader train_dl, val_dl;
    bad = dataloader_init(&train_dl, cfg.data.train, B, T, comm.dp_rank, comm.dp_size, cfg.model.vocab_size, err, sizeof(err)) != 0;
    agree_or_exit(bad, err, sizeof(err));
    int have_val = cfg.data.val[0] != '\0';
    if (have_val) {
        bad = dataloader_init(&val_dl, cfg.data.val, B, T, comm.dp_rank, comm.dp_size, cfg.model.vocab_size, err, sizeof(err)) != 0;
        agree_or_exit(bad, err, sizeof(err));
    }
    Tokenizer tok;
    bad = tokenizer_init(&tok, cfg.model.vocab_size, cfg.data.tokenizer[0] ? cfg.data.tokenizer : NULL, err, sizeof(err)) != 0;
    agree_or_exit(bad, err, sizeof(err));

    /* ---- model: one full model from a file (model.init_from wins) or from the seed
     * (host or device, per model.init), then this rank's slice ---- */
    GPTShape shape = config_model_shape(&cfg, comm.tp_size);
    /* sizes first (every product the model computes fits its type), then
     * memory (the node has room for every rank's estimate): before allocating */
    bad = params_shape_check(shape, comm.tp_size, B, T, err, sizeof(err)) != 0;
    agree_or_exit(bad, err, sizeof(err));
    bad = memcheck_run(shape, &comm, B, T, err, sizeof(err)) != 0;
    agree_or_exit(bad, err, sizeof(err));
    GPT model;
    gpt_init(&model, shape, comm.tp_size, comm.tp_rank, B, T, cfg.parallel.sp);
    double t_init = MPI_Wtime();
    const char* init_how = "file";
    if (cfg.model.init_from[0]) {
        float* full = NULL;
        int checked = 0;
        bad = (hf_is_dir(cfg.model.init_from) ? hf_read_dir(cfg.model.init_from, &model.pl, &full, &checked, err, sizeof(err))
               : params_read_full(cfg.model.init_from, &model.pl, &full, &checked, err, sizeof(err))) != 0;
        if (bad) agree_prefix(err, sizeof(err), "error: model.init_from: ");   /* the message names the file */
        agree_or_exit(bad, err, sizeof(err));
        if (!checked && world_rank == 0)
            printf("note: %s has no checksum (written by llm.c, transformers or an older tpfp8): loaded without verifying it\n",
                   cfg.model.init_from);
        gpt_set_params(&model, full);
        free(full);
    } else {
        init_how = gpt_init_random(&model, cfg.model.init, (unsigned long long)cfg.train.seed);
    }
    ops_sync();
    if (world_rank == 0) {
        printf("init: %s%s%s, %.1fM params, %.2f s\n", init_how, cfg.model.init_from[0] ? " " : "", cfg.model.init_from,
               (double)params_full_count(&model.pl) / 1e6, MPI_Wtime() - t_init);
        fflush(stdout);
    }

    /* ---- resume ---- */
    const char* ckpt_dir = cfg.checkpoint.dir;       /* config_load filled in the default */
    int start = 0;
    if (cfg.checkpoint.resume) {
        if (world_rank == 0) checkpoint_clean_tmp(ckpt_dir);   /* what a crash left mid-write */
        int latest = checkpoint_latest(ckpt_dir, INT_MAX);
        int agreed;
        wd_allreduce(&latest, &agreed, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, "finding the checkpoint to resume");
        if (agreed >= cfg.train.steps) {
            if (world_rank == 0) {
                printf("nothing to do: the newest checkpoint in %s is at step %d and train.steps is %d; raise "
                       "train.steps to train further\n", ckpt_dir, agreed, cfg.train.steps);
                fflush(stdout);
            }
            MPI_Finalize();
            return 0;
        }
        if (agreed >= 0) {
            bad = checkpoint_load(ckpt_dir, agreed, &model, &comm, &train_dl, err, sizeof(err)) != 0;
            if (bad) agree_prefix(err, sizeof(err), "error: checkpoint.resume: ");
            agree_or_exit(bad, err, sizeof(err));
            start = agreed;
        }
        if (world_rank == 0) {
            if (agreed >= 0) printf("resumed from %s at step %d\n", ckpt_dir, start);
            else printf("checkpoint.resume: no complete checkpoint in %s, starting from scratch\n", ckpt_dir);
            fflush(stdout);
        }
    }

    char* cfg_json = config_to_json(&cfg);
    Logger lg;
    bad = log_open(&lg, cfg.log.dir, world_rank == 0, start > 0, cfg_json, start, err, sizeof(err)) != 0;
    free(cfg_json);
    agree_or_exit(bad, err, sizeof(err));
    if (world_rank == 0) {
        printf("model: L=%d NH=%d C=%d T=%d V=%d (padded %d), %.2fM params | backend %s | tp=%d dp=%d | compress %s\n",
               shape.L, shape.NH, shape.C, shape.maxT, shape.V, shape.Vp,
               (double)params_full_count(&model.pl) / 1e6, ops_backend_name(), comm.tp_size, comm.dp_size,
               cfg.compress.method);
        printf("data: %lld train tokens (%s), batch %d x %d x dp %d | log %s/log.jsonl\n",
               (long long)dataloader_num_tokens(&train_dl), cfg.data.train, B, T, comm.dp_size, cfg.log.dir);
        fflush(stdout);
    }

    char note[256];
    const int graph = config_cuda_graph(&cfg, world_size, ops_graph_supported(), comm_graph_blocker(&comm), note,
                                        sizeof(note));
    if (world_rank == 0 && note[0]) {
        printf("%s\n", note);
        fflush(stdout);
    }
    int graph_ready = 0; /* captured */
    int warmed = 0;      /* the step before ran eagerly and could have been captured: it sized every buffer */

    size_t N = (size_t)B * T;
    int* inputs = mallocCheck(N * sizeof(int));
    int* targets = mallocCheck(N * sizeof(int));
    if (start == 0 && have_val && cfg.train.eval_every > 0) {
        /* the loss before any training: ln(V) for a fresh model, or the
         * quality of an init_from model */
        float v0 = evaluate(&model, &comm, &val_dl, cfg.train.eval_batches, inputs, targets);
        log_eval(&lg, 0, cfg.train.steps, v0);
    }
    int stopped = 0;
    size_t dev_peak = 0;   /* the device memory high-water, sampled after each step */
    for (int step = start; step < cfg.train.steps; step++) {
        int done = step + 1;                          /* optimizer steps completed after this one */
        comm_step_begin(&comm, step);
        wd_set_step(step);
        ops_sync();
        double t0 = MPI_Wtime();

        dataloader_next(&train_dl, inputs, targets);
        float lr = schedule_lr(step, cfg.train.steps, cfg.train.lr, cfg.train.warmup_steps, cfg.train.lr_min_frac);
        gpt_stage(&model, inputs, targets);
        gpt_stage_step(&model, lr, cfg.train.beta1, cfg.train.beta2, done);
        /* a step whose exchanges do host work runs eagerly (comm_step_plain:
         * always plain at one rank; the same answer on every rank) */
        const int plain = graph && comm_step_plain(&comm);
        if (plain && graph_ready) {
            ops_graph_launch();
            comm_graph_replayed(&comm);
        } else if (plain && warmed) {
            comm_graph_begin(&comm);
            ops_graph_begin();
            train_step(&model, &comm, &cfg);
            int nodes = ops_graph_end();
            comm_graph_captured(&comm);
            if (world_rank == 0) {
                printf("train.cuda_graph: step %d captured as one CUDA graph of %d nodes, replayed from now on%s\n",
                       done, nodes, world_size > 1 ? " (but for steps whose exchanges do host work)" : "");
                fflush(stdout);
            }
            ops_graph_launch();
            graph_ready = 1;
        } else {
            train_step(&model, &comm, &cfg);
        }
        warmed = plain;
        comm_step_wait(&comm);
        double ms = (MPI_Wtime() - t0) * 1e3;
        const StepScalars res = *model.step_host;
        float mean_loss = res.loss, norm = res.norm;
        if (res.skip) {   /* the device left the weights as they were */
            if (world_rank == 0) {
                fprintf(stderr, "error: non-finite %s at step %d (loss %g, grad norm %g). Stopping before the update; "
                        "no checkpoint was written for this step. Try a lower train.lr or a larger warmup.\n",
                        isfinite(mean_loss) ? "gradient norm" : "loss", done, mean_loss, norm);
                int shown = 0, more = 0;   /* the first sites to see NaN/inf point at where it started */
                comm_sites_read(&comm);
                for (int i = 0; i < comm.nsites; i++) {
                    if (!comm.sites[i].nonfinite) continue;
                    if (shown++ < 4) fprintf(stderr, "  exchange site %s saw %llu non-finite values\n",
                                             comm.sites[i].name, (unsigned long long)comm.sites[i].nonfinite);
                    else more++;
                }
                if (more) fprintf(stderr, "  ... and %d more sites\n", more);
            }
            MPI_Finalize();
            return 1;
        }
        comm_step_end(&comm);
        memcheck_sample(&dev_peak);

        StepRecord rec = {done, cfg.train.steps, mean_loss, lr, norm, ms, (double)N * comm.dp_size / (ms / 1e3),
                          comm.step_bytes, comm.step_ms, -1.0f, 0};
        rec.with_sites = comm_step_samples(&comm); /* (comm.step is this step's) */
        if (rec.with_sites) comm_sites_read(&comm); /* the one read of the step's site statistics */
        int last = done == cfg.train.steps;
        int eval = have_val && cfg.train.eval_every > 0 && (done % cfg.train.eval_every == 0 || last);
        if (eval) rec.val_loss = evaluate(&model, &comm, &val_dl, cfg.train.eval_batches, inputs, targets);
        if (done % cfg.log.every == 0 || last || eval) log_step(&lg, &rec, &comm);
        if (have_val && cfg.train.sample_every > 0 && cfg.train.sample_len > 0 && (done % cfg.train.sample_every == 0 || last)) {
            dataloader_reset(&val_dl);
            dataloader_next(&val_dl, inputs, targets);
            generate(&model, &comm, &cfg, &tok, inputs, done);
        }
        int saved = cfg.checkpoint.every > 0 && (done % cfg.checkpoint.every == 0 || last);
        if (saved) {
            bad = checkpoint_save(ckpt_dir, done, cfg.checkpoint.keep, &model, &comm, &train_dl, err, sizeof(err)) != 0;
            if (bad && world_rank == 0) fprintf(stderr, "error: checkpoint.dir: %s\n", err);
            if (bad) { MPI_Finalize(); return 1; }   /* every rank got the same verdict */
        }

        /* the step boundary: the ranks agree on a stop signal and on a failed
         * log write (rank 0's), so all stop after the same step */
        int mine[2] = {signals_pending(), lg.failed}, all[2];
        wd_set_site(NULL);
        wd_allreduce(mine, all, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD, "the step-boundary agreement");
        if (all[1]) {
            if (world_rank == 0) fprintf(stderr, "error: log.dir: %s; stopping after step %d\n", lg.err, done);
            MPI_Finalize();
            return 1;
        }
        if (all[0] && !last) {
            if (!saved) {
                bad = checkpoint_save(ckpt_dir, done, cfg.checkpoint.keep, &model, &comm, &train_dl, err, sizeof(err)) != 0;
                if (bad) {
                    if (world_rank == 0) fprintf(stderr, "error: stopping on %s: %s\n", signals_name(all[0]), err);
                    MPI_Finalize();
                    return 1;
                }
            }
            if (world_rank == 0 && signals_stdout_ready()) {
                printf("stopped by %s after step %d of %d; checkpoint written to %s. To continue, run the same "
                       "command with --set checkpoint.resume=true\n", signals_name(all[0]), done, cfg.train.steps, ckpt_dir);
                fflush(stdout);
            }
            stopped = 1;
            break;
        }
    }

    ops_graph_free();
    if (!stopped) log_print_curve(&lg);
    memcheck_report(shape, &comm, B, T, dev_peak);
    bad = log_close(&lg, err, sizeof(err)) != 0;   /* rank 0 only: the others have no log */
    if (bad) agree_prefix(err, sizeof(err), "error: log.dir: ");
    agree_or_exit(bad, err, sizeof(err));
    free(inputs);
    free(targets);
    tokenizer_free(&tok);
    dataloader_free(&train_dl);
    if (have_val) dataloader_free(&val_dl);
    gpt_free(&model);
    comm_free(&comm);
    wd_free();
    MPI_CHECK(MPI_Finalize());
    return 0;
}
