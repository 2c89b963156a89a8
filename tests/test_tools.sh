#!/usr/bin/env bash
# tests/test_tools.sh - end-to-end test of the experiment tools: tools/parity.py (runner,
# resume, failure report), tools/parity_summary.py (table, errors on bad logs),
# tools/plot_parity.py, tools/ablation.py (--collect and the table), tools/plot_hist.py,
# tools/check_layers.py (each rule caught on a small tree), tools/ncu_lines.py (a made-up
# kernel's line table and profile), tools/sass_waits.py (a made-up kernel's control bits),
# tools/sass_listing.sh (a stand-in nvdisasm) and tools/bench_ab.py (made-up benchmark tables
# and commands).
#
# Runs a tiny model (2 layers, d=64, 20 steps, TP=2) so the whole script takes well under
# 90 s on two cores; every mpirun is bounded by `timeout` (passed to the tools' --mpirun),
# so a hang fails instead of blocking CI. Prints one line per check; exits 1 on any failure.
# Standalone or from tests/run_tests.sh:  run test_tools tests/test_tools.sh
set -u
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
PY=/usr/bin/python3   # Debian's python, which has numpy and matplotlib
MPIRUN="timeout 120 mpirun --oversubscribe"
T=$(mktemp -d /tmp/test_tools.XXXXXX)
fails=0

ok()   { echo "  ok    $1"; }
bad()  { echo "  FAIL  $1"; fails=$((fails + 1)); }
check() {  # check WHAT COMMAND...: passes when COMMAND succeeds
    local what=$1; shift
    if "$@" > "$T/check.out" 2>&1; then ok "$what"; else bad "$what"; sed 's/^/        /' "$T/check.out" | tail -n 10; fi
}
expect_error() {  # expect_error WHAT PATTERN COMMAND...: COMMAND must exit non-zero and print PATTERN
    local what=$1 pattern=$2; shift 2
    if "$@" > "$T/err.out" 2>&1; then
        bad "$what (exit 0)"
    elif grep -Eq -- "$pattern" "$T/err.out"; then
        ok "$what: $(grep -E -m1 -- "$pattern" "$T/err.out" | cut -c1-110)"
    else
        bad "$what (no '$pattern' in the output)"; tail -n 5 "$T/err.out" | sed 's/^/        /'
    fi
}

check_out() {  # check_out WHAT TEST COMMAND...: COMMAND must succeed and TEST (bash, reading its output in $OUT_TXT) pass
    local what=$1 test=$2; shift 2
    if "$@" > "$T/out.txt" 2>&1 && OUT_TXT="$T/out.txt" bash -c "$test"; then ok "$what"
    else bad "$what"; tail -n 10 "$T/out.txt" | sed 's/^/        /'; fi
}

TINY=(--set model.n_layer=2 --set model.d_model=64 --set model.n_head=4 --set model.max_seq_len=32
      --set train.batch_size=4 --set train.seq_len=32 --set train.steps=20 --set train.eval_every=10
      --set train.sample_every=0 --set compress.stats_every=5 --set parallel.tp=2)
RUNNER=($PY tools/parity.py configs/default.json --root "$T/runs" --name tiny --variants none,taco
        --mpirun "$MPIRUN" "${TINY[@]}")
E=$T/runs/tiny

echo "parity runner (none + taco, 20 steps, TP=2)"
check "the runner succeeds" "${RUNNER[@]}"
check "parity.png is a non-empty PNG" bash -c "[ -s '$E/parity.png' ] && head -c 8 '$E/parity.png' | grep -q PNG"
check "summary.md and summary.csv exist" test -s "$E/summary.md" -a -s "$E/summary.csv"
check "summary.csv has exactly the rows none, taco" \
    bash -c "[ \"\$(cut -d, -f1 '$E/summary.csv' | tr '\n' ' ')\" = 'variant none taco ' ]"
check "summary.md's main table has exactly the rows none, taco" \
    bash -c "[ \"\$(sed -n '/^| variant | final step/,/^\$/p' '$E/summary.md' | grep -E '^\| [a-z]' | cut -d'|' -f2 | tr -d ' ' | tr '\n' ' ')\" = 'variant none taco ' ]"
check "both variants are DONE" test -f "$E/none/DONE" -a -f "$E/taco/DONE"
check "no variant diverged" $PY -c "import csv, sys; sys.exit(any(r['diverged'] != 'no' for r in csv.DictReader(open('$E/summary.csv'))))"

echo "resume"
before=$(stat -c '%Y %s' "$E/none/log.jsonl" "$E/taco/log.jsonl"; md5sum "$E"/*/log.jsonl)
check "a rerun succeeds" bash -c "$(printf '%q ' "${RUNNER[@]}") > '$T/rerun.out' 2>&1"
check "the rerun skips both finished variants" bash -c "[ \$(grep -c 'skipped' '$T/rerun.out') -eq 2 ]"
after=$(stat -c '%Y %s' "$E/none/log.jsonl" "$E/taco/log.jsonl"; md5sum "$E"/*/log.jsonl)
check "the skipped logs are untouched" test "$before" = "$after"
rm "$E/taco/DONE"
check "an unfinished variant is run again from scratch" bash -c "$(printf '%q ' "${RUNNER[@]}") > '$T/rerun2.out' 2>&1 &&
    grep -q 'none: skipped' '$T/rerun2.out' && grep -q 'taco: unfinished earlier run' '$T/rerun2.out' && test -f '$E/taco/DONE'"

echo "seeds (none + taco, 2 seeds each)"
S=$T/runs/seeds
check "the runner with --seeds 2 succeeds" $PY tools/parity.py configs/default.json --root "$T/runs" --name seeds \
    --variants none,taco --seeds 2 --mpirun "$MPIRUN" "${TINY[@]}"
check "every variant ran with both seeds" test -f "$S/none/DONE" -a -f "$S/none.s1/DONE" -a -f "$S/taco/DONE" -a -f "$S/taco.s1/DONE"
check "the second seed is a different run (another initial model)" $PY -c "
import json, sys
a, b = ([json.loads(l) for l in open(f) if '\"loss\"' in l] for f in ('$S/none/log.jsonl', '$S/none.s1/log.jsonl'))
sys.exit(a[0]['loss'] == b[0]['loss'])"
check "the summary has the rows none, taco, with the seed band and a verdict" $PY -c "
import csv, sys
rows = {r['variant']: r for r in csv.DictReader(open('$S/summary.csv'))}
assert sorted(rows) == ['none', 'taco'], rows
assert rows['none']['seeds'] == '2' and float(rows['none']['seed_band_pct']) > 0, rows['none']
assert rows['taco']['inside_seed_band'] in ('yes', 'no') and rows['taco']['seed_gap_pct'], rows['taco']"
check "summary.md explains the seed columns" grep -q "none's seed band %" "$S/summary.md"

echo "errors"
expect_error "missing config" "config 'nope.json' does not exist" $PY tools/parity.py nope.json
expect_error "unknown variant" "unknown variant 'tacoo'" $PY tools/parity.py configs/default.json --variants none,tacoo
expect_error "no seeds" "--seeds must be at least 1" $PY tools/parity.py configs/default.json --seeds 0
expect_error "a failing trainer is reported with its log" "variant taco FAILED; last 10 lines" \
    $PY tools/parity.py configs/default.json --root "$T/runs" --name broken --variants taco --mpirun "$MPIRUN" \
    "${TINY[@]}" --set model.n_head=3
cp -r "$E" "$T/missing"; rm "$T/missing/taco/log.jsonl"
expect_error "summary of a missing log" "missing log: .*missing/taco/log.jsonl" $PY tools/parity_summary.py "$T/missing"
cp -r "$E" "$T/corrupt"; head -c -25 "$E/taco/log.jsonl" > "$T/corrupt/taco/log.jsonl"
expect_error "summary of a truncated log line" "corrupt log: .*corrupt/taco/log.jsonl line [0-9]+" \
    $PY tools/parity_summary.py "$T/corrupt"
cp -r "$E" "$T/noval"; grep -v val_loss "$E/taco/log.jsonl" > "$T/noval/taco/log.jsonl"
expect_error "summary of a log without val_loss" "noval/taco/log.jsonl has no val_loss" \
    $PY tools/parity_summary.py "$T/noval"
cp -r "$E" "$T/nan"; sed -i '$ s/"loss":[^,]*/"loss":nan/' "$T/nan/taco/log.jsonl"
check "a log with C's 'nan' reads as diverged, not corrupt" bash -c "$PY tools/parity_summary.py '$T/nan' > /dev/null &&
    grep -q '^taco,.*,yes,\"non-finite loss\"' '$T/nan/summary.csv'"
check "plot_parity.py writes --out" bash -c "$PY tools/plot_parity.py '$E' --out '$T/p.png' && test -s '$T/p.png'"

echo "ablation and histograms (dumps of a 5-step run)"
check "ablation.py --collect succeeds" $PY tools/ablation.py --collect configs/default.json --steps 5 \
    --dump-dir "$T/abl/dumps" --mpirun "$MPIRUN" --out "$T/abl/ablation.md" "${TINY[@]}"
check "every site was dumped on both ranks (2 layers: 10 sites x 2)" \
    test "$(ls "$T"/abl/dumps/*.step4.rank*.npy | wc -l)" -eq 20
for row in "none (fp32)" fp8_tensor fp8_group int8_group taco "taco --no-hadamard" "taco --no-adaptive-scale" \
           "taco --no-dual-scale" "taco, E4M3 everywhere" "taco, E5M2 everywhere"; do
    check "ablation table has the row '$row'" grep -qF "| $row |" "$T/abl/ablation.md"
done
check "plot_hist.py writes a PNG" bash -c "$PY tools/plot_hist.py '$T/abl/dumps/L1.mlp.bwd.step4.rank0.npy' \
    --out '$T/hist.png' && head -c 8 '$T/hist.png' | grep -q PNG"
expect_error "plot_hist.py on a missing dump" "dump '.*nope.npy' does not exist" $PY tools/plot_hist.py "$T/nope.npy"

# tools/check_layers.py on small trees of our own making: each rule is caught, a clean tree passes
L="$T/layers"
mkdir -p "$L"/{train,model,comm,compress,data,ops,common,tests}
echo '#include "common/check.h"' > "$L/ops/ops.h"; touch "$L/common/check.h" "$L/data/shard.h" "$L/model/gpt.h"
echo '#include "ops/ops.h"' > "$L/comm/comm.c"; echo '#include "model/gpt.h"' > "$L/tests/t.c"
check "check_layers passes a tree whose includes point down" $PY tools/check_layers.py "$L"
echo '#include "model/gpt.h"' > "$L/comm/up.c"
expect_error "check_layers: an upward include" "comm/up.c:1: includes model/gpt.h: model/ \\(floor 4\\) is above" \
    $PY tools/check_layers.py "$L"
rm "$L/comm/up.c"; echo '#include "data/shard.h"' > "$L/compress/x.c"
expect_error "check_layers: compress/ including data/" "share floor 2 and stay independent" $PY tools/check_layers.py "$L"
rm "$L/compress/x.c"; echo '#include "shard.h"' > "$L/data/x.c"
expect_error "check_layers: an include that does not name its folder" "does not name a project folder" \
    $PY tools/check_layers.py "$L"
rm "$L/data/x.c"; echo '#include "ops/nope.h"' > "$L/comm/x.c"
expect_error "check_layers: an include of a missing header" "no such file" $PY tools/check_layers.py "$L"
rm "$L/comm/x.c"; seq 801 | sed 's|^|// |' > "$L/model/long.c"
expect_error "check_layers: a file over 800 lines" "model/long.c: 801 lines" $PY tools/check_layers.py "$L"

# tools/ncu_lines.py on a made-up kernel: nvdisasm's line table and ncu's source-page CSV for
# four SASS lines at offsets 0x0-0x30 (the CSV's addresses start elsewhere, as ncu's do)
N="$T/ncu"; mkdir -p "$N"
cat > "$N/lines.txt" <<'LINES'
//--------------------- .text._Z6kernelPf --------------------------
        //## File "/src/a.cuh", line 10
        /*0000*/                   FADD R1, R2, R3 ;
        /*0010*/                   FMUL R4, R1, R5 ;
        //## File "/src/b.cuh", line 20
        /*0020*/                   LDG.E R6, desc[UR4][R8.64] ;
        /*0030*/                   FFMA R7, R6, R6, R7 ;
LINES
{ echo '"Address","Source","Instructions Executed","stall_long_sb","stall_wait","stall_long_sb (Not Issued)"'
  echo '"0x7f0000001000","FADD R1, R2, R3","100","0","6","0"'
  echo '"0x7f0000001010","FMUL R4, R1, R5","100","0","2","0"'
  echo '"0x7f0000001020","LDG.E R6, desc[UR4][R8.64]","50","0","0","0"'
  echo '"0x7f0000001030","FFMA R7, R6, R6, R7","50","30","2","30"'; } > "$N/counts.csv"
NL=($PY tools/ncu_lines.py "$N/lines.txt" "$N/counts.csv" kernelPf 320)
check_out "ncu_lines.py: 300 warp instructions over 320 elements is 30 per element" \
    'grep -q "^30.00 instructions per element" $OUT_TXT' "${NL[@]}"
check_out "ncu_lines.py: a.cuh:10 has 20 of them, b.cuh:20 10" \
    'grep -Eq "^ *20.000  a.cuh:10" $OUT_TXT && grep -Eq "^ *10.000  b.cuh:20" $OUT_TXT' "${NL[@]}"
check_out "ncu_lines.py --ops: FADD and FMUL 10 each, LDG and FFMA 5" \
    'grep -Eq "^ *5.000  LDG" $OUT_TXT' "${NL[@]}" --ops
check_out "ncu_lines.py --stalls: 40 samples, long_sb 75%, and b.cuh:20 first with 80%" \
    'grep -q "^40 warp-state samples" $OUT_TXT && grep -Eq "^ *75.0%  long_sb" $OUT_TXT &&
     grep -A1 "where warps waited" $OUT_TXT | grep -Eq "80.0%  b.cuh:20 +long_sb 94%, wait 6%"' "${NL[@]}" --stalls
{ echo '"Address","Source","Instructions Executed"'; echo '"0x7f0000001000","FADD R1, R2, R3","100"'; } > "$N/nostalls.csv"
expect_error "ncu_lines.py --stalls on a CSV without stall columns" "has no stall_\\* columns" \
    $PY tools/ncu_lines.py "$N/lines.txt" "$N/nostalls.csv" kernelPf 320 --stalls
expect_error "ncu_lines.py with a kernel the line table lacks" "no function ending in nope" \
    $PY tools/ncu_lines.py "$N/lines.txt" "$N/counts.csv" nope 320

# tools/sass_waits.py on a made-up kernel: seven instructions whose control bits (the high word
# from bit 41: stall, yield, write barrier, read barrier, wait mask) make a loop in which the
# use of a step's value (0x20) also waits for the next step's load, sent at the end of the
# previous pass (0x40, reached by the branch only), as a barrier counts its loads; 0x30 waits
# on the same barrier right after, with nothing pending.
S="$T/sass"; mkdir -p "$S"
$PY - "$S/k.bin" <<'MAKE'
import struct, sys
def ctrl(stall=1, wb=7, rb=7, wm=0): return (stall | wb << 5 | rb << 8 | wm << 11) << 41
ins = [(0x981, ctrl(wb=5)), (0x984, ctrl(wb=1)), (0x812, ctrl(wm=1 << 5)), (0x802, ctrl(wm=1 << 5)),
       (0x981, ctrl(wb=5)), (0x947, ctrl(stall=5)), (0x94d, ctrl(stall=5))]
open(sys.argv[1], "wb").write(b"".join(struct.pack("<QQ", lo, hi) for lo, hi in ins))
MAKE
objcopy -I binary -O elf64-x86-64 --rename-section .data=.text._Z6kernelPf "$S/k.bin" "$S/k.cubin"
cat > "$S/k.txt" <<'LINES'
//--------------------- .text._Z6kernelPf --------------------------
        /*0000*/                   LDG.E R2, desc[UR4][R4.64] ;
.L_x_1:
        /*0010*/                   LDS R6, [R7] ;
        /*0020*/                   LOP3.LUT P0, RZ, R2, 0x807fffff, RZ, 0xc0, !PT ;
        /*0030*/                   MOV R2, R8 ;
        /*0040*/                   LDG.E R8, desc[UR4][R9.64] ;
        /*0050*/               @P1 BRA `(.L_x_1) ;
        /*0060*/                   EXIT ;
LINES
SW=($PY tools/sass_waits.py "$S/k.cubin" "$S/k.txt" kernelPf)
check_out "sass_waits.py: 0x20 stalls 1 cycle and waits on barrier 5, 0x40 sets it" \
    'grep -Eq "^00020 st1 +w5 .*LOP3" $OUT_TXT && grep -Eq "^00040 st1 +W5 .*LDG" $OUT_TXT' "${SW[@]}"
check_out "sass_waits.py --reaching 20: both loads, the one before the loop and the next step's" \
    'grep -q "barrier 5 may be set by 00000" $OUT_TXT && grep -q "barrier 5 may be set by 00040" $OUT_TXT &&
     [ $(grep -c "may be set" $OUT_TXT) = 2 ]' "${SW[@]}" --reaching 20
check_out "sass_waits.py --reaching 30: nothing pending after 0x20's wait" \
    '[ $(grep -c "may be set" $OUT_TXT) = 0 ]' "${SW[@]}" --reaching 30
check_out "sass_waits.py --global-waits: address order flags 0x20 and 0x30" \
    'grep -q "^2 instructions wait on a barrier last set by" $OUT_TXT' "${SW[@]}" --global-waits
check_out "sass_waits.py --global-waits --flow: 0x20 alone, with both loads" \
    'grep -q "^1 instructions wait" $OUT_TXT && [ $(grep -c "may be set by 000[04]0: LDG" $OUT_TXT) = 2 ]' \
    "${SW[@]}" --global-waits --flow
check_out "sass_waits.py --opcodes: names read off the opcode field" \
    'grep -Eq "^00020 .* LOP3\$" $OUT_TXT' $PY tools/sass_waits.py "$S/k.cubin" - kernelPf --opcodes "$S/k.cubin:$S/k.txt"
expect_error "sass_waits.py --flow without a listing" "need the listing" \
    $PY tools/sass_waits.py "$S/k.cubin" - kernelPf --opcodes "$S/k.cubin:$S/k.txt" --global-waits --flow
expect_error "sass_waits.py with a listing of another build" "not one build" \
    $PY tools/sass_waits.py "$S/k.cubin" "$N/lines.txt" kernelPf

# tools/sass_listing.sh with a stand-in nvdisasm that reads only the version-7 header (ABI byte 7,
# e_flags 0x005a055a for SM 90) and lists four instructions at 0x0, 0x10, 0x40, 0x50: two gaps'
# worth of instructions it "did not know". The cubin is the one above with nvcc 13's header.
$PY - "$S/k.cubin" "$S/k13.cubin" <<'MAKE'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read()); b[8] = 8; struct.pack_into("<I", b, 0x30, 0x06005a04)
open(sys.argv[2], "wb").write(b)
MAKE
cat > "$S/fake_nvdisasm" <<'FAKE'
#!/usr/bin/env python3
import struct, sys
b = open(sys.argv[-1], "rb").read()
if b[8] != 7 or struct.unpack_from("<I", b, 0x30)[0] != 0x005a055a:
    sys.exit("fake nvdisasm: not a version-7 SM 90 header")
print("//--------------------- .text._Z6kernelPf --------------------------")
for off, ins in ((0x0, "LDG.E R2, [R4.64]"), (0x10, "LDS R6, [R7]"), (0x40, "MOV R2, R8"), (0x50, "EXIT")):
    print("        /*%04x*/                   %s ;" % (off, ins))
FAKE
chmod +x "$S/fake_nvdisasm"
check_out "sass_listing.sh: nvcc 13's header rewritten for nvdisasm 11.8; 4 listed, 2 left out in 1 gap" \
    'grep -q "4 instructions listed, 2 left out in 1 gaps" $OUT_TXT && grep -q "MOV R2, R8" "'"$S"'/k13.txt"' \
    env NVDISASM="$S/fake_nvdisasm" tools/sass_listing.sh "$S/k13.cubin" "$S/k13.txt"
expect_error "sass_listing.sh without an nvdisasm" "no nvdisasm" \
    env NVDISASM="$S/none" PATH=/usr/bin:/bin tools/sass_listing.sh "$S/k13.cubin" "$S/k13.txt"
expect_error "sass_listing.sh on a file that is not a cubin" "is not an ELF cubin" \
    env NVDISASM="$S/fake_nvdisasm" tools/sass_listing.sh "$S/k.txt" "$S/x.txt"

# tools/bench_ab.py on made-up bench_compress_gpu tables: build a's two rounds take 100 and 102 us
# on the decompress row (median 101), b's 90.9: b / a = 0.900; the compress row 50 against 60.
B="$T/ab"; mkdir -p "$B"
mk_bench() {  # mk_bench FILE DECOMPRESS_US COMPRESS_US: a two-row table in the bench's format
    { echo "bench_compress_gpu (kernels): Test GPU, 1 SMs, L2 1 MB, 2026-12-06 00:00:00"
      printf '%6s  %-22s %-13s %10s %9s %8s\n' MB method op us GB/s "vs copy"
      printf '%6d  %-22s %-13s %10.1f %9.1f %8.2f\n' 64 "taco G=64 delayed" decompress "$2" 100.0 0.90
      printf '%6d  %-22s delayed amax 95 (a comment line)\n' 64 "fp8_tensor delayed"
      printf '%6d  %-22s %-13s %10.1f %9.1f %8.2f\n' 64 "fp8_tensor delayed" compress "$3" 100.0 0.80; } > "$1"
}
mk_bench "$B/a1.txt" 100.0 50.0; mk_bench "$B/a2.txt" 102.0 50.0; mk_bench "$B/b1.txt" 90.9 60.0
AB=($PY tools/bench_ab.py)
check_out "bench_ab.py table: b / a is 0.900 on the decompress row, 1.200 on the compress row" \
    'grep -Eq "^\| 64 MB  taco G=64 delayed decompress \| 100.0, 102.0 \| 90.9 \| 0.90 \| 0.90 \| 0.900 \|\$" $OUT_TXT &&
     grep -Eq "fp8_tensor delayed compress .*\| 1.200 \|\$" $OUT_TXT && grep -q "^a: Test GPU" $OUT_TXT' \
    "${AB[@]}" table a="$B/a1.txt" b="$B/b1.txt" a="$B/a2.txt"
check_out "bench_ab.py table --rows --base b: one row, a / b" \
    '[ $(grep -c "^| 64 MB" $OUT_TXT) = 1 ] && grep -q "| a / b |" $OUT_TXT && grep -Eq "\| 1.100 \|\$" $OUT_TXT' \
    "${AB[@]}" table --rows decompress --base b a="$B/a1.txt" b="$B/b1.txt"
check_out "bench_ab.py run: rounds alternate (a b a b), one output per label and round, then the table" \
    "[ \"\$(tr '\n' ' ' < $B/order)\" = 'a b a b ' ] && ls $B/run/{a,b}_{1,2}.txt > /dev/null &&
     grep -Eq 'decompress .*\| 0.909 \|\$' \$OUT_TXT" \
    "${AB[@]}" run --out "$B/run" a="echo a >> $B/order; cat $B/a1.txt" b="echo b >> $B/order; cat $B/b1.txt"
expect_error "bench_ab.py run with a failing command: reported, the tool exits 1" "b \\(round 1\\) failed with exit status 3" \
    "${AB[@]}" run --rounds 1 --out "$B/run2" a="cat $B/a1.txt" b="echo oops; exit 3"
: > "$B/empty.txt"
expect_error "bench_ab.py table of an output without rows" "no benchmark rows in .*empty.txt" \
    "${AB[@]}" table a="$B/a1.txt" b="$B/empty.txt"
expect_error "bench_ab.py with an argument that is not LABEL=FILE" "is not LABEL=FILE" \
    "${AB[@]}" table "$B/a1.txt"
mk_ops() {  # mk_ops FILE STEP_MS LN_MS: bench_ops_gpu's table, one op name with spaces
    { echo "bench_ops_gpu: Test GPU, 1 SMs; GPT-2 124M, B=1 T=8"
      echo "step: median $2 ms (min $2, max $2) over 2 steps = 1k tok/s"; echo
      printf '%-30s %6s %9s %6s %12s %9s\n' op calls ms/step % rate "of ceil"
      printf '%-30s %6d %9.3f %5.1f%% %12s %9s\n' layernorm_backward 25 "$3" 2.7 "3044 GB/s" 72% \
             "matmul_backward (lm head)" 1 3.247 10.4 "780 TFLOP/s" 101% norm_backward_finish 1 0.008 0.0 - -; } > "$1"
}
mk_ops "$B/o1.txt" 30.00 0.800; mk_ops "$B/o2.txt" 27.00 0.600
check_out "bench_ab.py table of bench_ops_gpu outputs: step 0.900, layernorm_backward 0.750, the lm head row" \
    'grep -Eq "^\| step \(median\) \| 30.000 \| 27.000 \| - \| - \| 0.900 \|\$" $OUT_TXT &&
     grep -Eq "^\| layernorm_backward \| 0.800 \| 0.600 \| 0.72 \| 0.72 \| 0.750 \|\$" $OUT_TXT &&
     grep -Eq "^\| matmul_backward \(lm head\) \| 3.247 .*\| 1.000 \|\$" $OUT_TXT' \
    "${AB[@]}" table a="$B/o1.txt" b="$B/o2.txt"
expect_error "bench_ab.py table of a kernel table and an op table together" "mix" \
    "${AB[@]}" table a="$B/a1.txt" b="$B/o1.txt"

if [ $fails -eq 0 ]; then
    echo "all tool checks passed"; rm -rf "$T"
else
    echo "$fails tool checks failed (files kept in $T)"; exit 1
fi
