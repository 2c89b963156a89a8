/*
 * train/schedule.h - the learning-rate schedule: linear warmup, then cosine
 * decay to lr * lr_min_frac at the last step.
 */
#ifndef SCHEDULE_H
#define SCHEDULE_H

#include <math.h>

/* lr for the 0-based step `step` of `steps` */
static inline float schedule_lr(int step, int steps, float lr, int warmup, float min_frac) {
    if (step < warmup) return lr * (float)(step + 1) / (float)warmup;
    if (steps <= warmup + 1) return lr;
    float progress = (float)(step - warmup) / (float)(steps - warmup - 1);   /* 0 .. 1 */
    float cosine = 0.5f * (1.0f + cosf(3.14159265358979f * progress));      /* 1 .. 0 */
    return lr * (min_frac + (1.0f - min_frac) * cosine);
}

#endif /* SCHEDULE_H */
